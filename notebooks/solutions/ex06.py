"""Solutions of 06_gpu: what a decode call moves, and what CUDA-graph padding launches."""


def state_bytes_moved(nheads, headdim, dstate, element_size, batch):
    # Each live request's state is read once and written once: 2 x its size.
    # (Padded rows are skipped by the guard and move nothing.)
    return batch * 2 * nheads * headdim * dstate * element_size


def null_programs(dim, block_m, nheads, active, captured):
    # The grid is (cdiv(dim, block_m), captured, nheads) whatever the batch holds; every program
    # of a padded row loads its index, writes zeros to its output rows and leaves.
    tiles = (dim + block_m - 1) // block_m
    return tiles * nheads * (captured - active)
