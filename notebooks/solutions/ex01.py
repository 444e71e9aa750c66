"""Solutions of 01_null_block_sentinel: address arithmetic and the two guards."""


def first_element(state, idx):
    # state_ptr + idx * stride(0): in elements, relative to the pool's first element.
    # Slot -1 starts one whole slot *before* the pool.
    return idx * state.stride(0)


def skipped_rows(indices):
    # The fixed guard (#39064): the null block 0 and anything below it mean "no request here".
    return [row for row, idx in enumerate(indices) if idx <= 0]


def null_block_writers(indices):
    # The pre-#39064 guard skips only idx < 0: a padded row's 0 is a real slot to it,
    # so it loads the null block as its initial state and stores its result there.
    return [row for row, idx in enumerate(indices) if idx == 0]


def is_live_slot(idx, null_block_id):
    # Fix it yourself 01: one guard for every kernel, whichever sentinel the runner pads with.
    # The null block (0) holds no request and -1 is no block at all: only ids above the null
    # block are real state. (& and |, not and/or: a kernel passes a whole block of indices.)
    return idx > null_block_id
