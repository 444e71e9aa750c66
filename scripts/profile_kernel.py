"""Run one benchmark configuration eagerly a few times, for ncu to profile.

    ncu --kernel-name regex:'ssu|_gdn|gdn_tma|_conv|selective_scan_update|fused_recurrent|causal_conv1d' \
        --launch-skip 2 --launch-count 1 \
        --metrics gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed,... \
        python scripts/profile_kernel.py ssu bf16 256 [mambalab|vllm] [act=bf16,z=none,pools=cloned]

``mambalab-tma=R,W,E,S,P,N[,EP]`` (GDN only) runs mambalab's packed decode on the CUDA kernel with TMA in the launch
shape ``gated_delta_rule_tma.TmaShape(R, W, E, S, P, N, EP)`` (rows, warps, early, bulk store, pieces, persistent
ring, pieces read early; 0 / 1 for the flags), as an A/B's ``FORCE`` does.

The optional set-up is the bench's (``mambalab.gpu.bench.Case``): activation dtype (``act``, default
the state's), ``z`` (``z`` / ``none``), ``pools`` (``fresh`` / ``cloned``), ``tokens``; ``captured=16`` launches
that many rows of which ``batch`` are live (the bench's padded rows: the rest are the null block's).
"""

import sys

import torch

from mambalab.gpu import bench


def main() -> int:
    kernel, dtype, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
    impl = sys.argv[4] if len(sys.argv) > 4 else "mambalab"
    kw = {}
    if len(sys.argv) > 5:
        for item in sys.argv[5].split(","):
            k, _, v = item.partition("=")
            kw[k] = bench.DTYPES[v] if k == "act" else (v == "z") if k == "z" else int(v) if k in (
                "tokens", "captured") else v
    captured = kw.pop("captured", batch)
    if impl.startswith("mambalab-tma="):
        from mambalab.kernels import gated_delta_rule_tma as tma

        r, w, e, st, *rest = (int(x) for x in impl.partition("=")[2].split(","))
        tma.FORCE = tma.TmaShape(r, w, bool(e), bool(st), *rest)
        impl = "mambalab"
    if impl == "vllm":
        bench._vllm_path()
    calls, _ = bench.SETUPS[kernel](batch, captured, bench.DTYPES[dtype], 4 * 2**30, impl, **kw)
    for c in calls[:4]:
        c()
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
