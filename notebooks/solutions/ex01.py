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
