"""Run-to-run spread of the SSU's CUDA-graph padding cost (GPU only).

Times batch 9 unpadded, 9 padded to a captured 16 (null rows skipped) and 16,
alternated, five times, fp32 and bf16 state, with the benchmark's method
(mambalab.gpu.bench: cold cache, one CUDA graph of many launches), and prints the
extra microseconds of each repetition. A sub-microsecond difference of two
~20 µs calls is near the noise; this says how near.

    PYTHONPATH=lib python3 scripts/padding_spread.py
"""

import statistics
import sys

import torch

from mambalab.gpu import bench


def main() -> int:
    res: dict[tuple, list[float]] = {}
    for _ in range(5):
        for d in ("fp32", "bf16"):
            for a, c in ((9, 9), (9, 16), (16, 16)):
                calls, _ = bench.setup_ssu(a, c, bench.DTYPES[d], 16 * 2**30)
                res.setdefault((d, a, c), []).append(bench.time_graph(calls))
                del calls
                torch.cuda.empty_cache()
    for d in ("fp32", "bf16"):
        base, pad = res[(d, 9, 9)], res[(d, 9, 16)]
        extra = [p - b for p, b in zip(pad, base)]
        print(f"ssu {d}: 9 {statistics.median(base):.2f} us [{min(base):.2f}-{max(base):.2f}], 9->16 "
              f"{statistics.median(pad):.2f} [{min(pad):.2f}-{max(pad):.2f}], "
              f"16 {statistics.median(res[(d, 16, 16)]):.2f}; extra per rep {[round(e, 2) for e in extra]} "
              f"median {statistics.median(extra):+.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
