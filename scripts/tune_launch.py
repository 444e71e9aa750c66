"""Sweep the launch parameters of the three kernels on a GPU (prints the best per case).

The launch rules in the kernel modules were chosen by reasoning; this sweep
measures the alternatives with the benchmark's cold-cache CUDA-graph timing.
Usage: python scripts/tune_launch.py [--json FILE] [--batches 1,64,256]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import sys

import torch

from mambalab import bench
from mambalab.kernels import causal_conv1d as conv_mod
from mambalab.kernels import gated_delta_rule as gdn_mod
from mambalab.kernels import selective_state_update as ssu_mod


@contextlib.contextmanager
def patched(module, name, value):
    old = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, old)


# (tile sizes, warps) per kernel; --wide for the first, broad sweep.
NARROW = {"ssu": ([4, 8, 16, 32], [1, 2]), "gdn": ([4, 8, 16, 32], [1, 2]), "conv": ([32, 64, 128, 256], [1, 2])}
WIDE = {"ssu": ([4, 8, 16, 32, 64], [2, 4, 8, 16]), "gdn": ([4, 8, 16, 32, 64], [1, 2, 4, 8]),
        "conv": ([64, 128, 256, 512, 1024, 2048], [1, 2, 4, 8])}
SWEEP = dict(NARROW)


def ssu_configs():
    for bm, w in itertools.product(*SWEEP['ssu']):
        yield f"BLOCK_M={bm} warps={w}", lambda bm=bm, w=w: ssu_mod.launch_config_override(ssu_mod.LaunchConfig(bm, w))


def gdn_configs():
    for bv, w in itertools.product(*SWEEP['gdn']):
        yield f"BV={bv} warps={w}", lambda bv=bv, w=w: patched(
            gdn_mod, "launch_config", lambda K, V, HV, N, es, sms=132, bv=bv, w=w: (triton_np2(K), bv, w))


def conv_configs():
    for bn, w in itertools.product(*SWEEP['conv']):
        yield f"BLOCK_N={bn} warps={w}", lambda bn=bn, w=w: patched(
            conv_mod, "launch_config", lambda dim, batch, dtype, device, bn=bn, w=w: (bn, w))


def triton_np2(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


CASES = {"ssu": (bench.setup_ssu, ssu_configs), "gdn": (bench.setup_gdn, gdn_configs),
         "conv": (bench.setup_conv, conv_configs)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernels", default="ssu,gdn,conv")
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--batches", default="1,64,256")
    ap.add_argument("--json")
    ap.add_argument("--wide", action="store_true", help="the broad first sweep (more warps, bigger tiles)")
    args = ap.parse_args()
    if args.wide:
        SWEEP.update(WIDE)
    copy = bench.copy_bandwidth()
    print(f"copy peak {copy:.0f} GB/s", flush=True)
    results = []
    for kname in args.kernels.split(","):
        setup, configs = CASES[kname]
        for dname in args.dtypes.split(","):
            for batch in map(int, args.batches.split(",")):
                best = None
                for label, ctx in configs():
                    try:
                        with ctx():
                            calls, nbytes = setup(batch, batch, bench.DTYPES[dname], 16 * 2**30)
                            us = bench.time_graph(calls)
                    except Exception as e:  # a config the compiler refuses (registers, shared memory)
                        print(f"{kname} {dname} b={batch} {label}: failed ({type(e).__name__})", flush=True)
                        continue
                    finally:
                        torch.cuda.empty_cache()
                    pct = 100 * nbytes / (us * 1e-6) / 1e9 / copy
                    results.append(dict(kernel=kname, dtype=dname, batch=batch, config=label, us=us, pct=pct))
                    if best is None or us < best[1]:
                        best = (label, us, pct)
                print(f"BEST {kname} {dname} b={batch}: {best[0]}  {best[1]:.2f} us  {best[2]:.0f}% of copy",
                      flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"copy_gbps": copy, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
