"""Solutions of 06_gpu: what a decode call moves, and what CUDA-graph padding launches."""


def state_bytes_moved(nheads, headdim, dstate, element_size, batch):
    # Each live request's state is read once and written once: 2 x its size.
    # (Padded rows are skipped by the guard and move nothing.)
    return batch * 2 * nheads * headdim * dstate * element_size


def null_programs(dim, block_m, nheads, active, max_num_seqs):
    # First the graph: the dispatcher replays the smallest captured size that holds the active
    # requests (one row per token). Then the grid (cdiv(dim, block_m), captured, nheads) runs
    # whatever the batch holds: every program of a padded row loads its index and writes zeros.
    from mambalab.worker.cudagraph_dispatcher import default_capture_sizes

    captured = min(s for s in default_capture_sizes(max_num_seqs) if s >= active)
    if captured > max_num_seqs:  # no FULL decode graph of that size: PIECEWISE, requests not padded
        captured = active
    tiles = (dim + block_m - 1) // block_m
    return tiles * nheads * (captured - active)
