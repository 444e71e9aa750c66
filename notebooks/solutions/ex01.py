"""Solutions of 01_null_block_sentinel: address arithmetic, what each guard does, the fix in the kernels."""


def first_element(state, idx):
    # state_ptr + idx * stride(0): in elements, relative to the pool's first element.
    # Slot -1 starts one whole slot *before* the pool.
    return idx * state.stride(0)


def row_effect(idx, guard):
    # What the guard lets through is used: a negative index lands before the pool (illegal),
    # 0 is the null block (shared by every padded row), anything else is the row's own slot.
    live = {"NONE": True, "EQ_NULL": idx != 0, "NEGATIVE": idx >= 0, "NULL": idx > 0}[guard]
    if not live:
        return "skipped"
    return "illegal" if idx < 0 else ("null block" if idx == 0 else "own slot")


def dirty_reads(launches):
    # Under '< 0' a row with index 0 loads block 0 and stores its result there. The null block is
    # clean until the first launch that stores into it; every later launch's rows with index 0
    # load what an earlier launch left. (Rows of the launch that first dirties it race: no order.)
    out, dirty = [], False
    for launch, indices in enumerate(launches):
        zeros = [row for row, idx in enumerate(indices) if idx == 0]
        if dirty:
            out += [(launch, row) for row in zeros]
        dirty = dirty or bool(zeros)
    return out


def is_live_slot(idx, null_block_id):
    # Fix it yourself 01: one guard for every kernel, whichever sentinel the runner pads with.
    # The null block (0) holds no request and -1 is no block at all: only ids above the null
    # block are real state. (& and |, not and/or: a kernel passes a whole block of indices.)
    return idx > null_block_id
