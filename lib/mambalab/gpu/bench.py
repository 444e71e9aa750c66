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

Baselines (issue 14), timed on the same inputs after an agreement gate (outputs and updated slots
of every implementation compared on one input; untouched slots bit-identical): vLLM's own decode
kernels for all three (``scripts/vllm_baseline.py`` extracts them from the vLLM wheel into
``.vllm/``, which this module puts on the path) and fla-core for the GDN (dense state, no slot indices: gated
against the one-token rule in torch instead, :mod:`mambalab.gpu.fla_baseline`).

Configurations (rows; ``Row.config``): state / activation dtypes (fp32 state with bf16 activations,
as NemotronH-class models are served with ``mamba_ssm_cache_dtype=float32``; bf16 / bf16; fp32 /
fp32), the SSU with ``z=None`` (as ``mamba_mixer2`` calls it) and with ``z``, pools cloned from one
random base or made fresh as ``randn * 0.1``, and speculative decoding (``T`` = 2..4 tokens a
request, 2-D indices, ``num_accepted_tokens``; the conv with varlen rows).

Run: ``python -m mambalab bench [--kernels ssu,gdn,conv] [--dtypes fp32,bf16]
[--batches 1,2,...] [--null-rows skip|move|both] [--quick] [--markdown FILE] [--json FILE]``. A kernel fault
ends the run: the rows before it are written, the JSON's environment says where it stopped (``"stopped"``) and the
exit status is 2.
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
    dtype: str  # the state's dtype
    batch: int
    captured: int
    us: float
    gbps: float
    pct_copy: float
    null_rows: str = "skip"  # padded rows skipped ("skip") or moving the null block ("move")
    act: str = ""  # activations' dtype (x, B, C, z, q, k, v, out); "" = the state's (older runs)
    z: str = "z"  # SSU: gated by z ("z") or not ("none", as mamba_mixer2 calls it)
    pools: str = "fresh"  # "fresh": each pool randn * 0.1; "cloned": every pool a clone of one randn base
    tokens: int = 1  # tokens per request: 1 = a decode step, 2..4 = speculative decoding
    agree: bool | None = None  # the agreement gate with the other implementations (None: not checked)
    dt: str = "head"  # SSU: A, dt, dt_bias, D one per head, broadcast ("head", mamba_mixer2) or per element
    us_after_torch: float | None = None  # µs/call, each launch after a torch kernel that does not trigger PDL

    @property
    def main(self) -> bool:
        """Whether the row is its kernel's main configuration for its state dtype (:func:`main_config`: what
        :func:`plan` times first, and notebook 06's sections 4-6 draw). Rows of older runs (no ``act``) are all
        main: they timed one configuration per kernel and state dtype."""
        return not self.act or main_config(self.kernel, self.dtype, self.act, self.z, self.pools, self.tokens,
                                           self.dt)

    @property
    def config(self) -> str:
        """The configuration key of the row, without the implementation and batch."""
        return config_key(self.kernel, self.dtype, self.act or self.dtype, self.z, self.pools, self.tokens,
                          self.dt)


def config_key(kernel: str, state: str, act: str, z: str = "z", pools: str = "fresh", tokens: int = 1,
               dt: str = "head") -> str:
    key = f"{kernel} state={state} act={act}"
    if kernel == "ssu":
        key += f" z={z}"
        if dt != "head":
            key += f" dt={dt}"
    key += f" pools={pools}"
    if tokens > 1:
        key += f" T={tokens}"
    return key


# shapes, per-kernel inputs and the agreement gate: mambalab.gpu.bench_cases (re-exported here)
from mambalab.gpu.bench_cases import (  # noqa: E402,F401
    CASES, CONV, GATE_TOL, GDN, SSU, Case, ConvCase, GDNCase, SSUCase, _esize, _indices, _rel_rms, agreement,
)
from mambalab.gpu import fla_baseline  # noqa: E402

# Configurations users run (issue 14): (state, activations) per kernel, z for the SSU, the pools'
# making, and speculative decoding (T tokens per request, 2-D indices, num_accepted_tokens).
STATE_ACT = {"ssu": [("fp32", "bf16"), ("bf16", "bf16"), ("fp32", "fp32")],
             "gdn": [("fp32", "bf16"), ("bf16", "bf16"), ("fp32", "fp32")],
             "conv": [("bf16", "bf16"), ("fp32", "fp32")]}
SPEC_TOKENS = [2, 3, 4]
SPEC_BATCHES = [1, 8, 64, 256]
VARIANT_BATCHES = [1, 8, 64, 256, 512]  # batches of the secondary variants (z, fresh pools, A/dt per element)
# A/dt per element also at the unpadded batches 4 does not divide (its kernel's REQS, mamba_ssm_untied: call 292)
ELEMENT_EXTRA_BATCHES = [9, 57, 257]
# fla-core is timed up to this batch (the bench's largest). It once faulted (illegal address) at 512: call 258 found
# that the bench passed beta where fla-core 0.6.0 takes gk, so its kernel read far past beta's end. Called by keyword
# (mambalab.gpu.fla_baseline), it ran clean under compute-sanitizer memcheck at 1, 57, 128 and 512 (call 259).
FLA_MAX_BATCH = 512
# The small-batch compared rows (pools cloned, A/dt per head) are also timed after a torch kernel that does not trigger
# programmatic dependent launch (``time_graph_after_torch``): in the plain graph a launch follows the previous launch
# of the same kernel, which lets mambalab's kernels (PDL) overlap it; in a model the kernel before may not.
AFTER_TORCH_MAX_BATCH = 16
BENCH_REP_MS = 60  # do_bench's repetition time per row (its warm-up: a quarter of it)


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


def capture_graph(calls: list[Callable[[], object]]) -> torch.cuda.CUDAGraph:
    """A CUDA graph replaying ``calls`` once each (the first call run once before, on a side stream, to compile)."""
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
    return graph


def time_graph(calls: list[Callable[[], object]], rep_ms: int | None = None) -> float:
    """Microseconds per call of a CUDA graph replaying ``calls`` once each."""
    import triton.testing

    graph = capture_graph(calls)
    rep = rep_ms or BENCH_REP_MS
    ms = triton.testing.do_bench(graph.replay, warmup=max(rep // 4, 5), rep=rep, return_mode="median")
    return ms * 1e3 / len(calls)


_torch_bufs: list[torch.Tensor] = []


def torch_neighbour(i: int) -> None:
    """A torch kernel that does not trigger its dependents (a ``mul_`` on 256 KiB; two buffers, alternating)."""
    if not _torch_bufs:
        _torch_bufs.extend(torch.zeros(1 << 16, device="cuda") for _ in range(2))
    _torch_bufs[i % 2].mul_(0.5)


def after_torch(calls: list[Callable[[], object]]) -> list[Callable[[], object]]:
    """Each of ``calls`` preceded by :func:`torch_neighbour` (the after-torch harness's sequence)."""
    return [(lambda i=i, c=c: (torch_neighbour(i), c())) for i, c in enumerate(calls)]


def time_graph_after_torch(calls: list[Callable[[], object]], rep_ms: int | None = None) -> float:
    """Microseconds per call when each call follows :func:`torch_neighbour` in the graph, the graph of those torch
    kernels alone subtracted: what a launch costs after a kernel that does not let it start early."""
    both = time_graph(after_torch(calls), rep_ms)
    return both - time_graph([(lambda i=i: torch_neighbour(i)) for i in range(len(calls))], rep_ms)


def time_eager(calls: list[Callable[[], object]], pools: int = 4) -> tuple[float, float]:
    """A harness without CUDA graphs: ``triton.testing.do_bench`` of eager calls cycling over ``pools``
    pools (its default L2 flush before each call, events around each call), and the host's own
    microseconds per call (the Python wrapper and the launch, the GPU queue never full).

    Returns ``(device_us, host_us)``. When the host needs longer per call than the GPU, the GPU
    waits between calls and ``device_us`` grows: that is what an eager harness sees of the wrapper.
    """
    import time

    import triton.testing

    calls = calls[:pools]
    state = {"i": 0}

    def one():
        calls[state["i"] % len(calls)]()
        state["i"] += 1

    one()
    torch.cuda.synchronize()
    ms = triton.testing.do_bench(one, return_mode="median")
    torch.cuda.synchronize()
    n = 64
    t0 = time.perf_counter()
    for _ in range(n):
        one()
    host = (time.perf_counter() - t0) / n * 1e6
    torch.cuda.synchronize()
    return ms * 1e3, host


def make_case(kernel: str, state: str, act: str, z: str, pools: str, tokens: int, active: int, captured: int,
              dt: str) -> Case:
    """A case of :data:`CASES` from a configuration's names (a plan entry's): dtypes by name, ``z`` "z" or "none"."""
    return CASES[kernel](active, captured, DTYPES[state], DTYPES[act], z == "z", pools, tokens, dt)


def _timed_calls(case: Case, impl: str, budget: int, bugs: BugConfig | None):
    L = _num_pools(case.pool_bytes, budget)
    pools = case.make_pools(L)
    return [(lambda p=p: case.call(impl, p, bugs)) for p in pools]


# -- per-kernel set-ups of the older benchmark (scripts/tune_launch.py, profile_kernel.py):
# each returns (list of closures, bytes moved per call); activations in the state dtype, fresh pools.

def _legacy(kernel):
    def setup(active: int, captured: int, dtype: torch.dtype, budget: int, impl: str = "mambalab",
              bugs: BugConfig | None = None, *, act: torch.dtype | None = None, z: bool = True,
              pools: str = "fresh", tokens: int = 1, dt: str = "head"):
        if impl == "fla":
            return setup_fla(active, dtype, budget)
        case = CASES[kernel](active, captured, dtype, act or dtype, z, pools, tokens, dt)
        return _timed_calls(case, impl, budget, bugs), case.nbytes
    setup.__name__ = f"setup_{kernel}"
    return setup


def _fla_problem(active: int, budget: int, device: str = "cuda"):
    """fla-core's function, one token's inputs (:func:`mambalab.gpu.fla_baseline.inputs`) and the dense fp32 state
    pools of a cold-cache graph, each read and a fresh final state written per launch."""
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule as fla_fn  # type: ignore

    HV, K, V = GDN["HV"], GDN["K"], GDN["V"]
    L = _num_pools(fla_baseline.nbytes(active), budget)
    pools = [torch.randn(active, HV, K, V, device=device, dtype=torch.float32) * 0.1 for _ in range(L)]
    return fla_fn, fla_baseline.inputs(active, device), pools


def setup_fla(active: int, dtype: torch.dtype, budget: int, device: str = "cuda"):
    """fla-core's ``fused_recurrent_gated_delta_rule`` (:mod:`mambalab.gpu.fla_baseline`): dense fp32 state per
    sequence, fresh final state. The bench gates it too (:func:`run`); this is the launches alone."""
    fn, x, pools = _fla_problem(active, budget, device)
    return fla_baseline.calls(fn, x, pools), fla_baseline.nbytes(active)


setup_ssu, setup_gdn, setup_conv = _legacy("ssu"), _legacy("gdn"), _legacy("conv")
SETUPS = {"ssu": setup_ssu, "gdn": setup_gdn, "conv": setup_conv}


def baselines() -> dict[str, list[str]]:
    """The other implementations importable here, per kernel: vLLM's own (all three), fla-core (GDN)."""
    out: dict[str, list[str]] = {"ssu": [], "gdn": [], "conv": []}
    _vllm_path()
    try:
        from vllm.model_executor.layers.mamba.ops.causal_conv1d import causal_conv1d_update  # noqa: F401
        from vllm.model_executor.layers.mamba.ops.mamba_ssm import selective_state_update  # noqa: F401
        from vllm.third_party.flash_linear_attention.ops.fused_recurrent import (  # noqa: F401
            fused_recurrent_gated_delta_rule_packed_decode,
        )
        from vllm.third_party.flash_linear_attention.ops.fused_sigmoid_gating import (  # noqa: F401
            fused_sigmoid_gating_delta_rule_update,
        )

        for k in out:
            out[k].append("vllm")
    except Exception as e:  # noqa: BLE001
        print(f"# vLLM's kernels not importable ({type(e).__name__}: {e}); no vLLM baseline", flush=True)
    try:
        import fla  # noqa: F401

        out["gdn"].append("fla")
    except Exception:  # noqa: BLE001
        pass
    return out


def _vllm_path() -> None:
    """Put the extracted vLLM kernels (scripts/vllm_baseline.py: ``.vllm/``) on the path, if present."""
    import os
    from pathlib import Path

    for cand in (os.environ.get("MAMBALAB_VLLM_DIR"), Path.cwd() / ".vllm",
                 Path(__file__).resolve().parents[3] / ".vllm"):
        if cand and (Path(cand) / "vllm" / "__init__.py").exists() and str(cand) not in sys.path:
            sys.path.insert(0, str(cand))
            return


MAIN_POOLS = "cloned"  # the main configuration's pools (fresh pools are a variant)


def main_z(kernel: str) -> str:
    """The main configuration's ``z``: the SSU without it, as ``mamba_mixer2`` calls it; the other kernels take no
    ``z`` and keep the field's default."""
    return "none" if kernel == "ssu" else "z"


def main_config(kernel: str, state: str, act: str, z: str, pools: str, tokens: int, dt: str) -> bool:
    """Whether a configuration is its kernel's main one for its state dtype: the first activation dtype of
    ``STATE_ACT`` for that state, :func:`main_z`, :data:`MAIN_POOLS`, one token, ``A``/``dt`` per head."""
    main_act = next((a for s, a in STATE_ACT.get(kernel, ()) if s == state), state)
    return act == main_act and z == main_z(kernel) and pools == MAIN_POOLS and tokens == 1 and dt == "head"


def plan(kernels, batches, padded, null_rows=("skip",), full: bool = True):
    """The rows to measure: (kernel, state, act, z, pools, tokens, active, captured, null_rows, dt)."""
    out = []
    for k in kernels:
        for state, act in STATE_ACT[k]:
            mz = main_z(k)
            shapes = [(b, b, "skip") for b in batches] + [(a, c, m) for a, c in padded for m in null_rows]
            for a, c, m in shapes:
                out.append((k, state, act, mz, MAIN_POOLS, 1, a, c, m, "head"))
            if full and act == "bf16":
                vb = [b for b in VARIANT_BATCHES if b in batches]
                for b in vb:
                    out.append((k, state, act, mz, "fresh", 1, b, b, "skip", "head"))
                    if k == "ssu":
                        out.append((k, state, act, "z", MAIN_POOLS, 1, b, b, "skip", "head"))
                        out.append((k, state, act, mz, MAIN_POOLS, 1, b, b, "skip", "element"))
                if k == "ssu":  # A/dt per element also where its kernel's groups of requests do not divide the batch
                    out += [(k, state, act, mz, MAIN_POOLS, 1, b, b, "skip", "element")
                            for b in ELEMENT_EXTRA_BATCHES if b in batches]
            if full and (act == "bf16" or k == "conv"):
                for T in SPEC_TOKENS:
                    for b in SPEC_BATCHES:
                        out.append((k, state, act, mz, MAIN_POOLS, T, b, b, "skip", "head"))
    return out


def run(kernels, dtypes, batches, padded, budget_gb: float, extra_impls: bool,
        null_rows: tuple[str, ...] = ("skip",), full: bool = True,
        state_act: dict | None = None) -> tuple[list[Row], float, str | None]:
    """Rows of every configuration planned, the copy peak, and where a kernel fault stopped the run (None: it did
    not). A fault leaves the CUDA context unusable, so it ends the run: the rows measured before it are returned."""
    copy_gbps = copy_bandwidth()
    budget = int(budget_gb * 2**30)
    rows: list[Row] = []
    stopped = None
    others = baselines() if extra_impls else {k: [] for k in kernels}
    global STATE_ACT
    saved = STATE_ACT
    STATE_ACT = state_act or {k: [sa for sa in saved[k] if sa[0] in dtypes] for k in saved}
    try:
        todo = plan(kernels, batches, padded, null_rows, full)
    finally:
        STATE_ACT = saved
    fla_batches = []
    try:
        for k, state, act, z, pools, T, active, captured, mode, dt in todo:
            case = make_case(k, state, act, z, pools, T, active, captured, dt)
            impls = ["mambalab"] + ([i for i in others[k] if i == "vllm"] if mode == "skip" else [])
            agree = None
            if len(impls) > 1:
                agree, msg = agreement(case, impls)
                if not agree:
                    print(f"# GATE FAILED {config_key(k, state, act, z, pools, T, dt)} batch {active}/{captured}: "
                          f"{msg}", flush=True)
            after_torch = len(impls) > 1 and active <= AFTER_TORCH_MAX_BATCH and pools == "cloned" and dt == "head"
            for impl in impls:
                bugs = NULL_ROW_MODES[mode] if impl == "mambalab" else None
                calls = _timed_calls(case, impl, budget, bugs)
                us = time_graph(calls)
                us_nb = time_graph_after_torch(calls) if after_torch else None
                del calls
                gbps = case.nbytes / (us * 1e-6) / 1e9
                rows.append(Row(k, impl, state, active, captured, us, gbps, 100 * gbps / copy_gbps, mode,
                                act, z, pools, T, agree, dt, us_nb))
                print(_fmt(rows[-1]), flush=True)
            # fla-core: dense fp32 state, no slot indices: the main configuration's unpadded rows of fp32 state,
            # timed last
            if ("fla" in others[k] and state == "fp32" and active == captured and active <= FLA_MAX_BATCH
                    and main_config(k, state, act, z, pools, T, dt)):
                fla_batches.append((k, state, act, z, pools, active))
            del case
            torch.cuda.empty_cache()
        for k, state, act, z, pools, active in fla_batches:
            fn, x, states = _fla_problem(active, budget)
            agree, msg = fla_baseline.agreement(fn, x, states[0])
            if not agree:
                print(f"# GATE FAILED fla-core batch {active}: {msg}", flush=True)
            us = time_graph(fla_baseline.calls(fn, x, states))
            del states
            gbps = fla_baseline.nbytes(active) / (us * 1e-6) / 1e9
            rows.append(Row(k, "fla", state, active, active, us, gbps, 100 * gbps / copy_gbps, "skip",
                            act, z, pools, 1, agree))
            print(_fmt(rows[-1]), flush=True)
            torch.cuda.empty_cache()
    except (RuntimeError, torch.AcceleratorError if hasattr(torch, "AcceleratorError") else RuntimeError) as e:
        # a kernel fault leaves the CUDA context unusable: keep what was measured, say where it stopped
        stopped = f"after {len(rows)} rows: {type(e).__name__}: {(str(e).splitlines() or [''])[0]}"
        print(f"# STOPPED {stopped}", flush=True)
    return rows, copy_gbps, stopped


def _fmt(r: Row) -> str:
    gate = {None: "", True: "ok", False: "FAIL"}[r.agree]
    nb = "" if r.us_after_torch is None else f"{r.us_after_torch:.2f}"
    zcol = (r.z + ("" if r.dt == "head" else f", dt/{r.dt}")) if r.kernel == "ssu" else ""
    return (f"| {r.kernel} | {r.impl} | {r.dtype} | {r.act or r.dtype} | {zcol} | "
            f"{r.pools} | {r.tokens} | {r.batch} | {r.captured} | {r.null_rows} | {r.us:.2f} | "
            f"{r.gbps:.0f} | {r.pct_copy:.0f}% | {gate} | {nb} |")


HEADER = ("| kernel | impl | state | act | z | pools | T | batch | captured | padded rows | µs/call | GB/s | "
          "% of copy | gate | µs after torch |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")


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


def _baseline_versions() -> dict:
    out = {}
    try:
        import vllm  # type: ignore

        out["vllm"] = getattr(vllm, "__version__", "?") + (" (decode kernels extracted by scripts/vllm_baseline.py)"
                                                          if "Stand-in" in (vllm.__doc__ or "") else "")
    except Exception:  # noqa: BLE001
        pass
    try:
        import fla  # type: ignore

        out["fla"] = getattr(fla, "__version__", "?")
    except Exception:  # noqa: BLE001
        pass
    return out


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
    ap.add_argument("--quick", action="store_true",
                    help="only the main configuration of each (state, activations) pair: no z / fresh-pool "
                         "variants, no speculative decoding rows")
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
    others = baselines() if not args.no_baselines else {}
    env["baselines"] = {k: v for k, v in others.items() if v}
    env.update(_baseline_versions())
    print(f"# {env}\n{HEADER}", flush=True)
    modes = ("skip", "move") if args.null_rows == "both" else (args.null_rows,)
    rows, copy_gbps, stopped = run(kernels, dtypes, batches, [] if args.no_padded else PADDED, args.budget_gb,
                                   not args.no_baselines, modes, full=not args.quick)
    if stopped:
        env["stopped"] = stopped
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
    return 2 if stopped else 0  # 2: a kernel fault ended the run early (the rows before it are written)


__all__ = ["main", "copy_bandwidth", "time_graph", "environment", "Row", "SETUPS", "NULL_ROW_MODES"]
