"""Sweep the launch parameters of the three kernels on a GPU (prints the best per case).

The launch rules in the kernel modules are the winners of this sweep; it
measures each alternative with the benchmark's cold-cache CUDA-graph timing
(``mambalab.gpu.bench``: same shapes, same bytes). Usage::

    python scripts/tune_launch.py [--kernels ssu,gdn,conv] [--dtypes fp32,bf16]
        [--batches 1,64,256,9:16] [--old DIR] [--json FILE] [--wide]

A batch ``A:C`` is ``A`` requests padded to a captured size ``C`` with null
rows. ``--old DIR`` adds a baseline configuration "previous": the kernel
modules found in ``DIR`` (e.g. ``git show HEAD:lib/mambalab/kernels/X.py``),
run with their own launch rules, so a change is judged against the code it
replaces in the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import itertools
import json
import sys
from pathlib import Path

import torch

from mambalab.gpu import bench
from mambalab.kernels import causal_conv1d as conv_mod
from mambalab.kernels import gated_delta_rule as gdn_mod
from mambalab.kernels import mamba_ssm as ssu_mod


@contextlib.contextmanager
def patched(*changes):
    """Set ``(module, name, value)`` attributes for the block, then put the old values back."""
    old = [(m, n, getattr(m, n)) for m, n, _ in changes]
    for m, n, v in changes:
        setattr(m, n, v)
    try:
        yield
    finally:
        for m, n, v in old:
            setattr(m, n, v)


# per kernel: the narrow sweep (default) and the broad one (--wide)
NARROW = {
    "ssu": dict(block_m=[4, 8, 16], warps=[1]),
    "gdn": dict(bv_split=[(8, 1), (16, 1), (16, 2), (32, 2)], warps=[1]),
    "conv": dict(column_bytes=[256, 512], rows=[1, 2, 4, 8]),
}
WIDE = {
    "ssu": dict(block_m=[4, 8, 16, 32, 64], warps=[1, 2, 4]),
    "gdn": dict(bv_split=[(4, 1), (8, 1), (8, 2), (16, 1), (16, 2), (32, 1), (32, 2), (64, 2)], warps=[1, 2]),
    "conv": dict(column_bytes=[128, 256, 512, 1024], rows=[1, 2, 4, 8, 16]),
}
SWEEP = dict(NARROW)
OLD: dict[str, object] = {}  # kernel -> module loaded from --old
GENERAL_CONV = False  # --conv-general: sweep the general conv kernel's launch instead of the decode one


def ssu_configs():
    if not SWEEP["ssu"]["block_m"]:  # --block-m none: the kernel's own launch rule only
        yield "rule", contextlib.nullcontext
    for bm, w in itertools.product(SWEEP["ssu"]["block_m"], SWEEP["ssu"]["warps"]):
        yield f"BLOCK_M={bm} warps={w}", lambda bm=bm, w=w: ssu_mod.launch_config_override(
            ssu_mod.LaunchConfig(bm, w))
    if "ssu" in OLD:
        old = OLD["ssu"]
        yield "previous", lambda: patched((ssu_mod, "selective_state_update", old.selective_state_update))


def gdn_configs():
    for (bv, split), w in itertools.product(SWEEP["gdn"]["bv_split"], SWEEP["gdn"]["warps"]):
        rule = lambda K, V, HV, N, es, sms=132, multi_token=False, bv=bv, w=w: (triton_np2(K), bv, w)  # noqa: E731
        yield f"BV={bv} SPLIT={split} warps={w}", lambda rule=rule, split=split: patched(
            (gdn_mod, "launch_config", rule), (gdn_mod, "SPLIT_BY_ELEMENT_SIZE", {2: split, 4: split}))
    if "gdn" in OLD:
        old = OLD["gdn"]
        yield "previous", lambda: patched(
            (gdn_mod, "fused_recurrent_gated_delta_rule", old.fused_recurrent_gated_delta_rule))


def conv_configs():
    if GENERAL_CONV:  # the general kernel (speculative decoding, varlen): column bytes x warps
        for cb, w in itertools.product([256, 512, 1024], [1, 2, 4]):
            yield f"general column={cb}B warps={w}", lambda cb=cb, w=w: patched(
                (conv_mod, "GENERAL_COLUMN_BYTES", cb), (conv_mod, "GENERAL_WARPS", w))
        return
    for cb, rows in itertools.product(SWEEP["conv"]["column_bytes"], SWEEP["conv"]["rows"]):
        yield f"column={cb}B ROWS={rows}", lambda cb=cb, rows=rows: patched(
            (conv_mod, "DECODE_COLUMN_BYTES", cb), (conv_mod, "DECODE_ROWS", rows))
    if "conv" in OLD:
        old = OLD["conv"]
        yield "previous", lambda: patched((conv_mod, "causal_conv1d_update", old.causal_conv1d_update),
                                          (conv_mod, "make_conv_state", old.make_conv_state))


def triton_np2(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


CASES = {"ssu": (bench.setup_ssu, ssu_configs), "gdn": (bench.setup_gdn, gdn_configs),
         "conv": (bench.setup_conv, conv_configs)}
FILES = {"ssu": "mamba_ssm.py", "gdn": "gated_delta_rule.py", "conv": "causal_conv1d.py"}


def load_old(directory: Path) -> None:
    """Import the previous kernel modules from ``directory`` as siblings of the current ones."""
    for kname, fname in FILES.items():
        path = directory / fname
        if not path.exists():
            continue
        name = f"mambalab.kernels._previous_{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        OLD[kname] = module


def parse_shapes(text: str) -> list[tuple[int, int]]:
    shapes = []
    for item in text.split(","):
        a, _, c = item.strip().partition(":")
        shapes.append((int(a), int(c or a)))
    return shapes


def parse_setup(text: str) -> dict:
    """``act=bf16,z=none,pools=cloned,tokens=2`` -> keyword arguments of the bench's set-ups."""
    out = {}
    for item in text.split(","):
        if item.strip():
            k, _, v = item.strip().partition("=")
            out[k] = int(v) if k == "tokens" else v
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernels", default="ssu,gdn,conv")
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--batches", default="1,64,256", help="comma list; A:C = A requests padded to C")
    ap.add_argument("--old", type=Path, help="folder with the previous kernel modules (baseline 'previous')")
    ap.add_argument("--json")
    ap.add_argument("--wide", action="store_true", help="the broad sweep (more warps, bigger tiles)")
    ap.add_argument("--block-m", help="SSU: comma list of BLOCK_M to sweep (overrides the sweep's)")
    ap.add_argument("--warps", help="SSU: comma list of num_warps to sweep")
    ap.add_argument("--setups", default="",
                    help="';'-separated benchmark set-ups (mambalab.gpu.bench.Case), e.g. "
                         "'act=bf16,z=none,pools=cloned;act=same,z=z,pools=fresh' (default: the older bench's)")
    ap.add_argument("--eager", action="store_true",
                    help="time without CUDA graphs: do_bench of eager calls over 4 pools (bench.time_eager), "
                         "and the host's microseconds per call")
    ap.add_argument("--conv-general", action="store_true",
                    help="conv: sweep the general kernel (speculative decoding: give --setups tokens=T)")
    ap.add_argument("--vllm", action="store_true", help="also time vLLM's kernel (scripts/vllm_baseline.py)")
    args = ap.parse_args()
    if args.wide:
        SWEEP.update(WIDE)
    if args.old:
        load_old(args.old)
    if args.block_m:
        SWEEP["ssu"] = dict(SWEEP["ssu"], block_m=[] if args.block_m == "none" else
                            [int(v) for v in args.block_m.split(",")])
    if args.warps:
        SWEEP["ssu"] = dict(SWEEP["ssu"], warps=[int(v) for v in args.warps.split(",")])
    setups = [parse_setup(t) for t in args.setups.split(";")] if args.setups else [{}]
    if args.vllm:
        bench._vllm_path()
    global GENERAL_CONV
    GENERAL_CONV = args.conv_general
    copy = bench.copy_bandwidth()
    print(f"copy peak {copy:.0f} GB/s", flush=True)
    results = []
    for kname in args.kernels.split(","):
        setup, configs = CASES[kname]
        for dname in args.dtypes.split(","):
            for (active, captured), su in itertools.product(parse_shapes(args.batches), setups):
                best = None
                tag = ",".join(f"{k}={v}" for k, v in su.items())
                kw = {k: (bench.DTYPES[v] if k == "act" else (v == "z") if k == "z" else v)
                      for k, v in su.items() if not (k == "act" and v == "same")}
                cfgs = list(configs()) + ([("vllm", contextlib.nullcontext)] if args.vllm else [])
                for label, ctx in cfgs:
                    try:
                        with ctx():
                            calls, nbytes = setup(active, captured, bench.DTYPES[dname], 16 * 2**30,
                                                  "vllm" if label == "vllm" else "mambalab", **kw)
                            if args.eager:
                                us, host = bench.time_eager(calls)
                                label_host = f" host {host:.1f} us/call"
                            else:
                                us, label_host = bench.time_graph(calls), ""
                    except Exception as e:  # a config the compiler refuses (registers, shared memory)
                        print(f"{kname} {dname} b={active}:{captured} {label}: failed ({type(e).__name__}: "
                              f"{str(e)[:120]})", flush=True)
                        continue
                    finally:
                        calls = None
                        torch.cuda.empty_cache()
                    pct = 100 * nbytes / (us * 1e-6) / 1e9 / copy
                    results.append(dict(kernel=kname, dtype=dname, batch=active, captured=captured, config=label,
                                        setup=tag, us=us, pct=pct))
                    print(f"{kname} {dname} [{tag}] b={active}:{captured} {label}: {us:.2f} us {pct:.0f}%"
                          f"{label_host}",
                          flush=True)
                    if label != "vllm" and (best is None or us < best[1]):
                        best = (label, us, pct)
                if best is not None:
                    print(f"BEST {kname} {dname} [{tag}] b={active}:{captured}: {best[0]}  {best[1]:.2f} us  "
                          f"{best[2]:.0f}% of copy", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": bench.environment(), "copy_gbps": copy, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
