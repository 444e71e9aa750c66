"""Bandwidth benchmark of the decode-state kernels (GPU only).

Decode kernels are memory-bound: each token reads a request's state once and
writes it once. So the figure of merit is achieved bandwidth as a fraction of
a device-to-device copy measured in the same run (kernels.md).

Method: cold cache. For each configuration a CUDA graph of ``L`` launches is
captured, each launch on its own state pool, with ``L`` large enough that the
pools together dwarf the L2 cache; ``triton.testing.do_bench(graph.replay,
return_mode="median")`` divided by ``L`` is the time of one call. Padded rows
(``B_active < B_captured``) point at the null block: with the fixed guard
they are skipped and move no state ("skip"); ``--null-rows move`` (or
``both``) also times them without the skip, i.e. under the pre-#39064 guard
that only skips ``< 0`` ("move": padded rows load and store the null block),
which is what CUDA-graph padding costs without null-row skipping.

Inputs are vLLM's decode calls: for the SSU, ``A``, ``dt``, ``dt_bias`` and
``D`` broadcast along the head dim (stride 0), as ``mamba_mixer2`` passes
them.

Run: ``python -m mambalab bench [--kernels ssu,gdn,conv] [--dtypes fp32,bf16]
[--batches 1,2,...] [--null-rows skip|move|both] [--markdown FILE] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
from dataclasses import asdict, dataclass
from typing import Callable

import torch

from mambalab.lab.bugs import BugConfig
from mambalab.constants import NULL_BLOCK_ID
from mambalab.device import DEVICE_TYPE

L2_BYTES = 50 * 2**20
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
DEFAULT_BATCHES = [1, 2, 4, 8, 9, 16, 32, 57, 64, 128, 256, 257, 512]
# (active, captured) pairs: CUDA-graph padding with null rows
PADDED = [(9, 16), (57, 64), (257, 272)]
# How padded rows are treated: skipped by the fixed guard, or moving the null
# block's state (the guard of #39064's pre-fix world, which skips only < 0).
NULL_ROW_MODES = {"skip": BugConfig.fixed(), "move": BugConfig.with_bugs("guard-lt-zero")}


@dataclass
class Row:
    kernel: str
    impl: str
    dtype: str
    batch: int
    captured: int
    us: float
    gbps: float
    pct_copy: float
    null_rows: str = "skip"  # padded rows skipped ("skip") or moving the null block ("move")


# -- shapes (kernels.md) -----------------------------------------------------------
SSU = dict(nheads=128, headdim=64, dstate=128, ngroups=8)  # NemotronH-8B class
GDN = dict(H=16, HV=32, K=128, V=128)  # Qwen3-Next TP1
CONV = dict(dim=8192, width=4)  # Qwen3-Next


def copy_bandwidth(nbytes: int = 2**30) -> float:
    """GB/s of a device-to-device ``copy_`` of ``nbytes`` (read + write counted)."""
    import triton.testing

    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").uniform_()
    dst = torch.empty_like(src)
    ms = triton.testing.do_bench(lambda: dst.copy_(src), return_mode="median")
    return 2 * nbytes / (ms * 1e-3) / 1e9


def _num_pools(pool_bytes: int, budget_bytes: int) -> int:
    want = max(2, math.ceil(4 * L2_BYTES / max(pool_bytes, 1)))
    cap = max(1, budget_bytes // max(pool_bytes, 1))
    return int(min(want, cap, 256))


def _indices(active: int, captured: int) -> torch.Tensor:
    idx = torch.full((captured,), NULL_BLOCK_ID, dtype=torch.int32)
    idx[:active] = torch.randperm(active, dtype=torch.int32) + 1
    return idx.cuda()


def time_graph(calls: list[Callable[[], object]]) -> float:
    """Microseconds per call of a CUDA graph replaying ``calls`` once each."""
    import triton.testing

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        calls[0]()  # compile outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for c in calls:
            c()
    ms = triton.testing.do_bench(graph.replay, return_mode="median")
    return ms * 1e3 / len(calls)


# -- per-kernel set-ups: each returns (list of closures, bytes moved per call) -------

def setup_ssu(active: int, captured: int, dtype: torch.dtype, budget: int, impl: str = "mambalab",
              bugs: BugConfig | None = None):
    from mambalab.kernels.mamba_ssm import selective_state_update

    nh, hd, ds, ng = SSU["nheads"], SSU["headdim"], SSU["dstate"], SSU["ngroups"]
    state_bytes = nh * hd * ds * torch.tensor([], dtype=dtype).element_size()
    pool_bytes = (captured + 1) * state_bytes
    L = _num_pools(pool_bytes, budget)
    dev = "cuda"
    x = torch.randn(captured, nh, hd, device=dev, dtype=dtype)
    dt = torch.randn(captured, nh, device=dev, dtype=dtype)[:, :, None].expand(captured, nh, hd)  # vLLM's decode
    A = (-torch.rand(nh, device=dev))[:, None, None].expand(nh, hd, ds)
    dt_bias = torch.randn(nh, device=dev)[:, None].expand(nh, hd)
    D = torch.randn(nh, device=dev)[:, None].expand(nh, hd)
    B = torch.randn(captured, ng, ds, device=dev, dtype=dtype)
    C = torch.randn(captured, ng, ds, device=dev, dtype=dtype)
    z = torch.randn(captured, nh, hd, device=dev, dtype=dtype)
    out = torch.empty_like(x)
    idx = _indices(active, captured)
    pools = [torch.randn(captured + 1, nh, hd, ds, device=dev, dtype=dtype) * 0.1 for _ in range(L)]
    if impl == "vllm":
        from vllm.model_executor.layers.mamba.ops.mamba_ssm import selective_state_update as vllm_fn  # type: ignore

        calls = [
            (lambda p=p: vllm_fn(p, x, dt, A, B, C, D, dt_bias=dt_bias, z=z, dt_softplus=True,
                                 state_batch_indices=idx, out=out))
            for p in pools
        ]
        return calls, active * 2 * state_bytes
    calls = [
        (lambda p=p: selective_state_update(p, x, dt, A, B, C, D, dt_bias=dt_bias, z=z, dt_softplus=True,
                                            state_batch_indices=idx, out=out, bugs=bugs))
        for p in pools
    ]
    return calls, active * 2 * state_bytes


def setup_gdn(active: int, captured: int, dtype: torch.dtype, budget: int, impl: str = "mambalab",
              bugs: BugConfig | None = None):
    H, HV, K, V = GDN["H"], GDN["HV"], GDN["K"], GDN["V"]
    esize = torch.tensor([], dtype=dtype).element_size()
    state_bytes = HV * V * K * esize
    dev = "cuda"
    q = torch.randn(1, captured, H, K, device=dev, dtype=torch.bfloat16)
    k = torch.nn.functional.normalize(torch.randn(1, captured, H, K, device=dev), dim=-1).to(torch.bfloat16)
    v = torch.randn(1, captured, HV, V, device=dev, dtype=torch.bfloat16)
    g = -torch.rand(1, captured, HV, device=dev) * 0.1
    beta = torch.rand(1, captured, HV, device=dev).to(torch.bfloat16)
    cu = torch.arange(captured + 1, dtype=torch.int32, device=dev)
    if impl == "fla":
        from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule as fla_fn  # type: ignore

        # fla keeps a dense state per sequence [N, HV, K, V] and writes a fresh fp32 final state.
        pool_bytes = active * HV * K * V * 4 * 2
        L = _num_pools(pool_bytes, budget)
        qa, ka, va, ga, ba = (t[:, :active] for t in (q, k, v, g, beta))
        cua = cu[: active + 1]
        pools = [torch.randn(active, HV, K, V, device=dev, dtype=torch.float32) * 0.1 for _ in range(L)]
        calls = [
            (lambda p=p: fla_fn(qa, ka, va, ga, ba, initial_state=p, output_final_state=True, cu_seqlens=cua))
            for p in pools
        ]
        return calls, active * 2 * HV * K * V * 4
    from mambalab.kernels.gated_delta_rule import fused_recurrent_gated_delta_rule

    pool_bytes = (captured + 1) * state_bytes
    L = _num_pools(pool_bytes, budget)
    idx = _indices(active, captured)
    pools = [torch.randn(captured + 1, HV, V, K, device=dev, dtype=dtype) * 0.1 for _ in range(L)]
    calls = [
        (lambda p=p: fused_recurrent_gated_delta_rule(
            q, k, v, g, beta, initial_state=p, inplace_final_state=True, cu_seqlens=cu,
            ssm_state_indices=idx, use_qk_l2norm_in_kernel=True, bugs=bugs))
        for p in pools
    ]
    return calls, active * 2 * state_bytes


def setup_conv(active: int, captured: int, dtype: torch.dtype, budget: int, impl: str = "mambalab",
               bugs: BugConfig | None = None):
    from mambalab.kernels.causal_conv1d import causal_conv1d_update, make_conv_state

    dim, width = CONV["dim"], CONV["width"]
    esize = torch.tensor([], dtype=dtype).element_size()
    state_bytes = dim * (width - 1) * esize
    pool_bytes = (captured + 1) * state_bytes
    L = _num_pools(pool_bytes, budget)
    dev = "cuda"
    x = torch.randn(captured, dim, device=dev, dtype=dtype)
    w = torch.randn(dim, width, device=dev, dtype=dtype)
    b = torch.randn(dim, device=dev, dtype=dtype)
    out = torch.empty_like(x)
    idx = _indices(active, captured)
    pools = []
    for _ in range(L):
        s = make_conv_state(captured + 1, dim, width - 1, dtype, dev)
        s.copy_(torch.randn_like(s))
        pools.append(s)
    calls = [
        (lambda p=p: causal_conv1d_update(x, p, w, b, activation="silu", conv_state_indices=idx, out=out,
                                          bugs=bugs))
        for p in pools
    ]
    # reads width-1 columns and writes them back, plus x and out
    return calls, active * (2 * state_bytes + 2 * dim * esize)


SETUPS = {"ssu": setup_ssu, "gdn": setup_gdn, "conv": setup_conv}


def run(kernels, dtypes, batches, padded, budget_gb: float, extra_impls: bool,
        null_rows: tuple[str, ...] = ("skip",)) -> tuple[list[Row], float]:
    copy_gbps = copy_bandwidth()
    budget = int(budget_gb * 2**30)
    rows: list[Row] = []
    impls = {k: ["mambalab"] for k in kernels}
    if extra_impls:
        try:
            import fla  # noqa: F401

            impls.get("gdn", []).append("fla")
        except Exception:
            pass
        try:
            import vllm  # noqa: F401

            impls.get("ssu", []).append("vllm")
        except Exception:
            pass
    for kname in kernels:
        for dname in dtypes:
            shapes = [(b, b, "skip") for b in batches] + [(a, c, m) for a, c in padded for m in null_rows]
            for impl in impls[kname]:
                if impl == "fla" and dname != "fp32":
                    continue  # fla's final state is fp32
                for active, captured, mode in shapes:
                    if impl != "mambalab" and (active != captured or mode != "skip"):
                        continue  # baselines: no slot indices / no guard switch
                    bugs = NULL_ROW_MODES[mode] if impl == "mambalab" else None
                    calls, nbytes = SETUPS[kname](active, captured, DTYPES[dname], budget, impl, bugs)
                    us = time_graph(calls)
                    gbps = nbytes / (us * 1e-6) / 1e9
                    rows.append(Row(kname, impl, dname, active, captured, us, gbps, 100 * gbps / copy_gbps, mode))
                    print(_fmt(rows[-1]), flush=True)
                    del calls
                    torch.cuda.empty_cache()
    return rows, copy_gbps


def _fmt(r: Row) -> str:
    return (f"| {r.kernel} | {r.impl} | {r.dtype} | {r.batch} | {r.captured} | {r.null_rows} | {r.us:.2f} | "
            f"{r.gbps:.0f} | {r.pct_copy:.0f}% |")


HEADER = ("| kernel | impl | state | batch | captured | padded rows | µs/call | GB/s | % of copy |\n"
          "|---|---|---|---|---|---|---|---|---|")


def environment() -> dict:
    import datetime

    import triton

    return {
        "date": datetime.date.today().isoformat(),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mambalab bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", default="ssu,gdn,conv")
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--batches", default=",".join(map(str, DEFAULT_BATCHES)))
    ap.add_argument("--no-padded", action="store_true", help="skip the B_active < B_captured rows")
    ap.add_argument("--no-baselines", action="store_true", help="skip fla-core / vLLM even if importable")
    ap.add_argument("--null-rows", choices=["skip", "move", "both"], default="both",
                    help="padded rows skipped by the guard, moving the null block's state, or both (default)")
    ap.add_argument("--budget-gb", type=float, default=24.0, help="GPU memory for state pools")
    ap.add_argument("--markdown", help="write the table to this file")
    ap.add_argument("--json", help="write rows and environment as JSON")
    args = ap.parse_args(argv)
    if DEVICE_TYPE != "cuda":
        print("python -m mambalab bench needs a CUDA GPU: it times kernels in CUDA graphs. "
              "On this machine kernels run under Triton's interpreter (MAMBALAB_DEVICE=cpu), "
              "where timings mean nothing.", file=sys.stderr)
        return 1
    kernels = [k.strip() for k in args.kernels.split(",") if k.strip()]
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    for k in kernels:
        if k not in SETUPS:
            ap.error(f"unknown kernel {k!r}; choose from {', '.join(SETUPS)}")
    for d in dtypes:
        if d not in DTYPES:
            ap.error(f"unknown dtype {d!r}; choose from {', '.join(DTYPES)}")
    batches = [int(b) for b in args.batches.split(",") if b.strip()]
    torch.manual_seed(0)
    env = environment()
    print(f"# {env}\n{HEADER}", flush=True)
    modes = ("skip", "move") if args.null_rows == "both" else (args.null_rows,)
    rows, copy_gbps = run(kernels, dtypes, batches, [] if args.no_padded else PADDED, args.budget_gb,
                          not args.no_baselines, modes)
    print(f"copy peak: {copy_gbps:.0f} GB/s")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(f"Device: {env['device']}; torch {env['torch']}; triton {env['triton']}; "
                    f"CUDA {env['cuda']}; copy peak {copy_gbps:.0f} GB/s\n\n{HEADER}\n")
            f.write("\n".join(_fmt(r) for r in rows) + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": env, "copy_gbps": copy_gbps, "rows": [asdict(r) for r in rows]}, f,
                      indent=1)
    return 0


__all__ = ["main", "copy_bandwidth", "time_graph", "environment", "Row", "SETUPS", "NULL_ROW_MODES"]
