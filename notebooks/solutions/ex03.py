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


def spec_source_slots(state_indices, anchor, num_spec):
    # Fix it yourself 03 (#41233's gather): 1 + num_spec consecutive blocks of each row, starting at
    # the block the previous step ended in (its anchor); the kernel then starts from column
    # num_accepted - 1 of them: the state after the last accepted token.
    import torch

    offsets = torch.arange(1 + num_spec, device=anchor.device)
    return state_indices.gather(1, anchor[:, None] + offsets)
