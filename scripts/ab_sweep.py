"""The A/B harness of issue 14's device calls: mambalab's kernel variants timed beside vLLM's in one process.

    # on the GPU machine, .vllm/ and .whl/ carried, the wheels in /tmp/site:
    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT PARTS=gdn python3 docs/results/issue14-call22-ab-stream.py

A script (one per call, kept in ``docs/results/`` beside its output) builds cases from
:mod:`mambalab.gpu.bench_cases` and calls :func:`sweep` with its variants and a setter that switches the
module-level rule between them. For each case: vLLM timed once; every variant timed twice, interleaved (A B ...
then reversed), the best of each kept; the agreement gate (:func:`mambalab.gpu.bench_cases.agreement`) run for
every variant on its first pass. Timing is the bench's: one CUDA graph of launches over as many pools as fit
the budget (cold L2), ``do_bench`` median per launch. Rows go to ``$OUT/<prefix>-<part>.json`` as they come.
A script that adds SSU entries or forms checks them first with :func:`ssu_reference_checks` (calls 243, 246 and 247
each carried that loop themselves).
"""

from __future__ import annotations

import itertools
import json
import os
import time

import torch

from mambalab.gpu import bench
from mambalab.gpu.bench_cases import agreement
from mambalab.lab.bugs import BugConfig

REP, BUDGET, FIX = 40, 8 * 2**30, BugConfig.fixed()
ALL = (1, 1 << 30)  # a rule's batch range that takes every batch


def parts(default: str) -> list[str]:
    """The parts of a script to run: ``$PARTS`` (comma-separated), else ``default``."""
    return os.environ.get("PARTS", default).split(",")


def register_cap(kernels) -> list[int]:
    """From here on every launch of one of ``kernels`` through the sanitizer gets ptxas' ``maxnreg`` of the returned
    list's one value while it is set (0: none); a variant sets ``cap[0]``."""
    from mambalab.lab import sanitizer

    launch, cap = sanitizer.launch, [0]

    def capped(kernel, grid, *args, **kwargs):
        if cap[0] and kernel in kernels:
            kwargs["maxnreg"] = cap[0]
        return launch(kernel, grid, *args, **kwargs)

    sanitizer.launch = capped
    return cap


# While set, every timed launch is preceded by a torch kernel that does not trigger its dependents (as the torch ops
# before a layer's kernel in a model), and the graph of those neighbours alone is subtracted
# (``bench.time_graph_after_torch``): in the bench a launch's neighbour is the previous launch of the same kernel,
# which lets PDL overlap the two (call 136).
NEIGHBOUR = [False]


def _calls(case, impl: str) -> list:
    """The bench's launches of ``impl`` ("mambalab" with every fix on, or "vllm") on ``case``, one a pool."""
    return bench._timed_calls(case, impl, BUDGET, FIX if impl == "mambalab" else None)


def timed(case, impl: str, after_torch: bool | None = None) -> float:
    """µs a launch of ``impl`` on ``case``, the bench's timing; after a torch kernel where ``after_torch`` says so
    (None: :data:`NEIGHBOUR`)."""
    calls = _calls(case, impl)
    nb = NEIGHBOUR[0] if after_torch is None else after_torch
    us = bench.time_graph_after_torch(calls, REP) if nb else bench.time_graph(calls, REP)
    del calls
    return us


def pair_time(first, second, impl: str) -> float:
    """µs a launch of ``first`` then ``second`` (a layer's conv, then its SSU or GDN) after a torch kernel, the torch
    kernel subtracted: one graph over as many pools of each as fit the budget."""
    a, b = _calls(first, impl), _calls(second, impl)
    n = min(len(a), len(b))
    return bench.time_graph_after_torch([(lambda x=x, y=y: (x(), y())) for x, y in zip(a[:n], b[:n])])


class Sweep:
    """One call's A/B: the copy peak measured once, then :meth:`run` per part."""

    def __init__(self, prefix: str):
        bench._vllm_path()
        self.prefix, self.out = prefix, os.environ.get("OUT", ".")
        self.copy = bench.copy_bandwidth()
        print(f"copy {self.copy:.0f} GB/s", flush=True)

    def run(self, part, cases, variants, setv, make) -> list[dict]:
        """``make(key)`` builds a case per key; ``setv(name)`` switches to variant ``name`` ("base" first)."""
        rows, t0 = [], time.time()
        for key in cases:
            case = make(key)
            r = dict(part=part, key=key, us={v: [] for v in variants}, gate={})
            r["vllm"] = timed(case, "vllm")
            for p in range(2):
                for v in (variants if p == 0 else list(variants)[::-1]):
                    setv(v)
                    if p == 0:
                        ok, msg = agreement(case, ["mambalab", "vllm"])
                        r["gate"][v] = ok
                        if not ok:
                            print("# GATE FAILED", part, v, key, msg, flush=True)
                    r["us"][v].append(timed(case, "mambalab"))
            setv("base")
            m = {v: min(x) for v, x in r["us"].items()}
            pct = 100 * case.nbytes / r["vllm"] / 1e3 / self.copy
            print(f"{part} {key}: vllm {r['vllm']:7.2f} ({pct:4.1f}%) | " +
                  " ".join(f"{v} {m[v]:7.2f} ({r['vllm'] / m[v]:.3f}x)" for v in variants), flush=True)
            rows.append(r)
            with open(f"{self.out}/{self.prefix}-{part}.json", "w") as f:
                json.dump(dict(copy_gbps=self.copy, rows=rows), f, indent=0)
            del case
            torch.cuda.empty_cache()
        print(part, "done", round(time.time() - t0, 1), flush=True)
        return rows

    def run_parts(self, parts_, cases, variants, setv, make) -> dict[str, list[dict]]:
        """:meth:`run` for every part of ``parts_`` but "pairs" (:func:`pair_sweep`'s): in the bench's harness, or
        after a torch kernel where the part's name ends in "-nb" (:data:`NEIGHBOUR`, set back after)."""
        out = {}
        try:
            for part in [p for p in parts_ if p != "pairs"]:
                NEIGHBOUR[0] = part.endswith("-nb")
                out[part] = self.run(part, cases, tuple(variants), setv, make)
        finally:
            NEIGHBOUR[0] = False
        return out


def ssu_reference_checks(variants, setv, types, *, has_z=(False, True), batches=((1, 1), (9, 7)), nheads=128,
                         dim=64, dstate=128, seed=700) -> list[dict]:
    """Each SSU variant against the torch reference before it is timed: ``selective_state_update`` under the
    early-load promise with every fix on, on Nemotron-H's head by default (128 heads of 64 x 128, 8 groups), A/dt
    one a head, null rows among the live ones (``batches``: ``(batch, live)``), outputs poisoned, for every
    ``(state dtype, activation dtype)`` of ``types`` and every ``has_z``. Prints the largest differences per check;
    ``AssertionError`` naming the checks that exceed the kernel tests' tolerances. ``setv("base")`` after."""
    import sys
    from pathlib import Path

    from mambalab.kernels import mamba_ssm
    from mambalab.kernels.mamba_ssm_ref import selective_state_update_ref
    from mambalab.kernels.testing import poison_, random_slot_indices, tolerance

    tests = str(Path(__file__).resolve().parents[1] / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    from test_kernel_selective_state_update import gen, make_case

    results = []
    for v, (st, act), z, (batch, live) in itertools.product(variants, types, has_z, batches):
        setv(v)
        case = make_case(seed + batch, rows=batch, nheads=nheads, dim=dim, dstate=dstate, ngroups=min(nheads, 8),
                         tied=True, slots=batch + 4, dtypes=(st, act), has_z=z)
        idx = random_slot_indices(batch, batch + 4, num_null_rows=batch - live, generator=gen(seed + 1))
        idx = idx.to(case.state.device)
        state, s_ref = case.state.clone(), case.state.clone()
        out, o_ref = poison_(torch.empty_like(case.kwargs["x"])), torch.empty_like(case.kwargs["x"])
        mamba_ssm.selective_state_update(state, out=out, state_batch_indices=idx, early_state_load=True, bugs=FIX,
                                         **case.kwargs)
        selective_state_update_ref(s_ref, out=o_ref, state_batch_indices=idx, **case.kwargs)
        r = dict(variant=v, state_dtype=str(st)[6:], act_dtype=str(act)[6:], z=z, batch=batch, live=live, ok=True)
        for name, got, want in (("out", out, o_ref), ("state", state, s_ref)):
            r[name] = (got.float() - want.float()).abs().max().item()
            rtol, atol = tolerance("ssu", got.dtype)
            r["ok"] &= torch.allclose(got.float(), want.float(), rtol=rtol, atol=atol)
        print(f"check {v} state {r['state_dtype']} act {r['act_dtype']} z={int(z)} batch {batch}/{live}: "
              f"out {r['out']:.2e} state {r['state']:.2e}{'' if r['ok'] else '  FAILED'}", flush=True)
        results.append(r)
    setv("base")
    bad = [r for r in results if not r["ok"]]
    assert not bad, f"{len(bad)} reference checks failed: {bad}"
    return results


def pair_sweep(label: str, shapes, make_pair, variants, setv, out_name: str) -> list[dict]:
    """Layer pairs per ``(active, captured)`` of ``shapes``: ``make_pair(active, captured)`` gives ``(first,
    second)``; vLLM's pair timed twice (best kept), each variant twice interleaved (best kept), the agreement gate
    on ``second`` per variant. Rows to ``$OUT/<out_name>`` as they come."""
    rows = []
    for active, captured in shapes:
        first, second = make_pair(active, captured)
        vllm = min(pair_time(first, second, "vllm") for _ in range(2))
        best, gates = {}, {}
        for rnd in range(2):
            for v in (variants if rnd == 0 else variants[::-1]):
                setv(v)
                if rnd == 0:
                    gates[v] = agreement(second, ["mambalab", "vllm"])[0]
                best[v] = min(best.get(v, 1e9), pair_time(first, second, "mambalab"))
        setv("base")
        print(f"pair {label} {active}->{captured}: vllm {vllm:7.2f} | "
              + " ".join(f"{v} {best[v]:7.2f} ({vllm / best[v]:.3f}x){'' if gates[v] else ' GATE FAIL'}"
                         for v in variants), flush=True)
        rows.append(dict(active=active, captured=captured, vllm=vllm, ours=best, gates=gates))
        with open(os.path.join(os.environ.get("OUT", "."), out_name), "w") as f:
            json.dump(rows, f, indent=0)
        del first, second
        torch.cuda.empty_cache()
    return rows
