"""Run one benchmark configuration eagerly a few times, for ncu to profile.

    ncu --kernel-name regex:'_ssu|_gdn|_conv' --launch-skip 2 --launch-count 1 \
        --metrics gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed,... \
        python scripts/profile_kernel.py ssu bf16 256
"""

import sys

import torch

from mambalab.gpu import bench


def main() -> int:
    kernel, dtype, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
    calls, _ = bench.SETUPS[kernel](batch, batch, bench.DTYPES[dtype], 4 * 2**30)
    for c in calls[:4]:
        c()
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
