"""Solutions of 00_tour: padding, slot mapping, how many state blocks a pool needs."""

from mambalab.worker.cudagraph_dispatcher import default_capture_sizes


def num_reqs_padded(num_reqs, max_num_seqs):
    # The batch has num_reqs tokens (one per request); the graph is the next capture size up.
    # A FULL decode graph exists only for sizes up to max_num_seqs tokens: there the requests are
    # padded to one row per token. Above it (max_num_seqs = 12: 10 tokens pad to 16) the step
    # replays PIECEWISE: tokens padded, requests not.
    sizes = default_capture_sizes(max_num_seqs)
    padded_tokens = min(s for s in sizes if s >= num_reqs)
    return padded_tokens if padded_tokens <= max_num_seqs else num_reqs


def slot_of(row, pos, block_size):
    # The block holding position pos, times the block size, plus the offset inside it.
    return row[pos // block_size] * block_size + pos % block_size


def pool_blocks(mode, max_model_len, block_size, num_spec, num_reqs):
    # Mode "none": one block holds a request's running state, whatever its length. Mode "all"
    # keeps the state at every block boundary: one block per block_size tokens of the longest
    # request. Either way each speculative token needs a block of its own (num_speculative_blocks),
    # every request needs its blocks at once, and block 0 is the null block nobody gets.
    per_request = (1 if mode == "none" else -(-max_model_len // block_size)) + num_spec
    return num_reqs * per_request + 1
