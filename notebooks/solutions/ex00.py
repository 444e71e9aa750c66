"""Solutions of 00_tour: padding, slot mapping, the size of a request's state."""

from mambalab.worker.cudagraph_dispatcher import default_capture_sizes


def num_reqs_padded(num_reqs, max_num_seqs):
    # The batch has num_reqs tokens (one per request); the graph is the next capture size up,
    # and a uniform decode pads the requests to one row per token, capped at max_num_seqs.
    sizes = default_capture_sizes(max_num_seqs)
    padded_tokens = min(s for s in sizes if s >= num_reqs)
    return max(num_reqs, min(padded_tokens, max_num_seqs))


def slot_of(row, pos, block_size):
    # The block holding position pos, times the block size, plus the offset inside it.
    return row[pos // block_size] * block_size + pos % block_size


def state_floats(cfg):
    # One slot holds every state tensor of the request; none of them depends on its length.
    total = 0
    for shape in cfg.state_shapes().values():
        n = 1
        for s in shape:
            n *= s
        total += n
    return total
