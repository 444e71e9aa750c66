"""Solutions of 03_spec_decode_slots: widths, block indices and the speculative gather."""


def state_indices_width(max_model_len, block_size, num_spec):
    # One column per block of a max_model_len request, plus one per speculative block (#41233).
    return -(-max_model_len // block_size) + num_spec  # -(-a // b) is ceil(a / b)


def block_indices(num_computed, seq_len, block_size):
    # The block holding the last computed token, the block of the first scheduled token,
    # and the block of the last scheduled token (as mamba_attn.py computes them).
    def cdiv(a, b):
        return -(-a // b)

    last_computed = max(cdiv(num_computed, block_size) - 1, 0)
    first_scheduled = cdiv(num_computed + 1, block_size) - 1
    last_scheduled = max(cdiv(seq_len, block_size) - 1, 0)
    return last_computed, first_scheduled, last_scheduled


def initial_state_slot(row, anchor, num_accepted):
    # The fixed gather reads 1 + num_spec slots starting at last step's anchor block; the kernel
    # starts from column num_accepted - 1: the state after the last accepted token.
    return row[anchor + num_accepted - 1]
