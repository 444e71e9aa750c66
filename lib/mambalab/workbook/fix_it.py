"""Fix it yourself: the learner's code substituted at the one point of the real engine where a fix went.

Each :class:`FixIt` leaves one catalogue bug switched on (the pre-fix
behaviour at that point) and plants the learner's function there with
:class:`mambalab.lab.planted.Plant`, as notebook 05 plants its padding bug;
the bug's scenario (:mod:`mambalab.lab.scenarios`) then runs over a few
seeds and the per-request reference judges it. The reference itself runs
outside the plant, so a wrong function cannot make engine and reference
agree by changing both. Every exercise has the same shape:

* 01 (#35431 / #39064): ``is_live_slot(idx, null_block_id)``, the guard of
  every state kernel (``mamba_ssm.py``, ``causal_conv1d.py``, FLA's
  ``fused_recurrent.py``), judged with padding ``-1`` and padding ``0``;
* 02 (#37728): ``clear_row(table, row)`` (``BlockTable.clear_row``, called by
  ``InputBatch.remove_request``) and ``dummy_run_commit(block_table,
  num_reqs)`` (the line of ``_dummy_run`` in ``gpu_model_runner.py``);
* 03 (#41233): ``spec_source_slots(state_indices, anchor, num_spec)``, the
  ``1 + num_spec`` slots the mixer gathers in ``mamba_cache_mode="all"``;
* 04 (#41873): ``mask_padded_rows(is_prefilling, num_reqs)``, the line of
  ``_build_attention_metadata`` after ``is_prefilling`` is computed.

A learner's exception inside a step becomes the verdict's crash (which step,
which rank), never an error of the notebook's kernel. Kernel guards are
Python evaluated inside the kernels, so exercise 01 needs Triton's
interpreter (the CPU).
"""

from __future__ import annotations

import contextlib
import inspect
import random
import textwrap
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from mambalab.constants import NULL_BLOCK_ID
from mambalab.device import DEVICE_TYPE
from mambalab.engine.core import Engine, EngineDidNotFinish
from mambalab.lab.bugs import BugConfig
from mambalab.lab.planted import Plant
from mambalab.lab.reference import judge
from mambalab.lab.scenarios import scenario_for, signatures
from mambalab.lab.verdict import Crash, Verdict
from mambalab.viz.text import Text
from mambalab.workbook.tracer import finish


class LearnerError(RuntimeError):
    """The learner's function raised inside the engine (the verdict names the step)."""


def _yours(name: str, fn: Callable) -> Callable:
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except LearnerError:
            raise
        except Exception as e:  # noqa: BLE001 - becomes the verdict's crash
            raise LearnerError(f"your {name} raised {type(e).__name__}: {e}") from e
    return call


# -- the plants ---------------------------------------------------------------------------------------


def guard_plants(is_live_slot: Callable) -> list[Plant]:
    """Every state kernel's guard replaced by ``is_live_slot(idx, null_block_id)`` (the GUARD constexpr ignored)."""
    from mambalab.kernels import (causal_conv1d_kernels, causal_conv1d_row_kernels, gated_delta_rule,
                                  gated_delta_rule_kernels, gated_delta_rule_stream, mamba_ssm, mamba_ssm_kernels,
                                  mamba_ssm_spec, mamba_ssm_untied)

    fn = _yours("is_live_slot", is_live_slot)

    def planted(idx, null_block_id, GUARD):  # noqa: N803 - the kernels pass it by this name
        return fn(idx, null_block_id)

    return [Plant("guard", "kernel guard: the learner's is_live_slot", m, "is_live_slot", planted)
            for m in (mamba_ssm, mamba_ssm_kernels, mamba_ssm_spec, mamba_ssm_untied,
                      causal_conv1d_kernels, causal_conv1d_row_kernels, gated_delta_rule, gated_delta_rule_kernels,
                      gated_delta_rule_stream)]


def stale_rows_plants(clear_row: Callable, dummy_run_commit: Callable) -> list[Plant]:
    """``remove_request`` then the learner's ``clear_row`` per KV-cache group; ``prepare_dummy_run`` then
    the learner's ``dummy_run_commit`` (``stale-rows`` on: the library does neither)."""
    from mambalab.worker.input_batch import InputBatch
    from mambalab.worker.runner_inputs import RunnerBuffers

    clear, commit = _yours("clear_row", clear_row), _yours("dummy_run_commit", dummy_run_commit)
    remove, prepare = InputBatch.remove_request, RunnerBuffers.prepare_dummy_run

    def remove_request(self, req_id):
        row = remove(self, req_id)
        if row is not None:
            for table in self.block_table.block_tables:
                clear(table, row)
        return row

    def prepare_dummy_run(self, input_batch, *args, **kwargs):
        prepared = prepare(self, input_batch, *args, **kwargs)
        commit(input_batch.block_table, prepared.num_reqs)
        return prepared

    return [Plant("clear_row", "remove_request then the learner's clear_row", InputBatch, "remove_request",
                  remove_request),
            Plant("dummy_run_commit", "the dummy run then the learner's commit", RunnerBuffers,
                  "prepare_dummy_run", prepare_dummy_run)]


def is_prefilling_plants(mask_padded_rows: Callable) -> list[Plant]:
    """``is_prefilling`` over the padded rows passed through the learner's ``mask_padded_rows(flags, num_reqs)``
    inside the runner's ``build_attention_metadata`` (``stale-is-prefilling`` on: the library masks nothing)."""
    from mambalab.worker import model_runner

    fn = _yours("mask_padded_rows", mask_padded_rows)
    build = model_runner.build_attention_metadata

    def build_attention_metadata(input_batch, buffers, num_reqs, num_reqs_padded, *args, **kwargs):
        computed = type(input_batch).is_prefilling

        def is_prefilling(num_rows):
            flags = torch.from_numpy(computed(input_batch, num_rows).copy())
            out = fn(flags, num_reqs)
            out = flags if out is None else torch.as_tensor(out)
            if out.shape != flags.shape:
                raise LearnerError(f"your mask_padded_rows returned shape {tuple(out.shape)}, expected "
                                   f"{tuple(flags.shape)} (one flag per padded row)")
            return out.to(torch.bool).numpy()

        input_batch.is_prefilling = is_prefilling
        try:
            return build(input_batch, buffers, num_reqs, num_reqs_padded, *args, **kwargs)
        finally:
            del input_batch.is_prefilling

    return [Plant("is_prefilling", "is_prefilling through the learner's mask_padded_rows", model_runner,
                  "build_attention_metadata", build_attention_metadata)]


def spec_gather_plants(spec_source_slots: Callable) -> list[Plant]:
    """The slots a speculative decode row reads in mode "all" from the learner's
    ``spec_source_slots(state_indices, anchor, num_spec)`` (``spec-slots/gather`` on)."""
    from mambalab.attention.mamba_metadata import MambaAttentionMetadataBuilder

    fn = _yours("spec_source_slots", spec_source_slots)
    slots = MambaAttentionMetadataBuilder.decode_state_slots

    def decode_state_slots(self, md):
        src, dst, na = slots(self, md)
        if self.mode != "all" or not self.num_spec:
            return src, dst, na
        d = md.state_indices_tensor_d
        anchor = md.block_idx_last_scheduled_token_prev_step.to(torch.int64)
        got = fn(d, anchor, self.num_spec)
        got = torch.as_tensor(got).to(device=d.device, dtype=d.dtype)
        if got.dim() == 1:
            got = got[:, None]
        if got.shape[0] != d.shape[0]:
            raise LearnerError(f"your spec_source_slots returned {got.shape[0]} rows, expected {d.shape[0]}")
        return got, dst, md.num_accepted_tokens

    return [Plant("spec_gather", "the learner's spec-decode source gather", MambaAttentionMetadataBuilder,
                  "decode_state_slots", decode_state_slots)]


# -- the runs -----------------------------------------------------------------------------------------


def run_planted(bug: str, seed: int, plants: list[Plant], max_steps: int = 200) -> tuple[Verdict, list]:
    """``bug``'s scenario with the bug on and ``plants`` active while the engine runs; judged without them."""
    return run_workload_planted(scenario_for(bug)(seed), BugConfig.with_bugs(bug), plants, max_steps)


def run_workload_planted(workload, bugs: BugConfig, plants: list[Plant], max_steps: int = 200) -> tuple[Verdict, list]:
    """Any workload under ``bugs`` with ``plants`` active while the engine runs (start-up included); the
    per-request reference judges it after the plants are gone."""
    return finish(run_workload_planted_units(workload, bugs, plants, max_steps))


@contextlib.contextmanager
def planted(plants: list[Plant]):
    """Every plant of ``plants`` active inside the block. (The CPU capture memo tells plants apart by
    the ``id()`` of the planted function; ``worker/cuda_graph.py`` pins every id it keys on, so a
    collected plant's id is never reused by another.)"""
    with contextlib.ExitStack() as stack:
        for p in plants:
            stack.enter_context(p)
        yield


def run_workload_planted_units(workload, bugs: BugConfig, plants: list[Plant], max_steps: int = 200):
    """:func:`run_workload_planted` in units, a generator (``finish`` runs it; its return value is the same):
    the start-up, then one engine step per ``next``. The plants are active inside each unit only, so other
    work can run between two units without them (a panel's idle time, ``widgets/idle.py``)."""
    with planted(plants):
        try:
            engine = Engine(workload.cfg, bugs)
        except Exception as e:  # noqa: BLE001 - a crash while capturing graphs is a verdict too
            return Verdict(ok=False, crash=Crash.at_startup(e)), []
        engine.schedule_events(workload.events)
    steps = engine.steps(max_steps)
    crash = None
    while crash is None:
        yield
        with planted(plants):
            try:
                crash = next(steps).crash  # the step loop of ``engine.run``: a crash ends it
            except StopIteration:
                break
            except EngineDidNotFinish as e:
                return Verdict(ok=False, crash=Crash.unfinished(e.max_steps), steps=max_steps), engine.records
    return judge(engine, crash), engine.records


@dataclass(frozen=True)
class FixIt:
    """One fix-it exercise: the functions the learner writes, where they go, which scenarios judge them."""

    id: str
    names: tuple[str, ...]
    bugs: tuple[str, ...]  # scenarios run with this switch on and the learner's code planted
    seeds: tuple[int, ...]
    plants: Callable[..., list[Plant]]
    where: str
    probe: Callable[..., str | None] | None = None  # property checks before the engine runs: a miss, or None
    cpu_only: bool = False


class FixResult(Text):
    """The engine's verdict on the learner's fix: one line per scenario run, ``passed`` to decide on."""

    def __new__(cls, fix_id: str, lines: list[str], passed: bool) -> "FixResult":
        self = super().__new__(cls, "\n".join(lines))
        self.fix_id, self.passed = fix_id, passed
        return self

    def __getnewargs__(self):
        return self.fix_id, str(self).split("\n"), self.passed


def _not_answered(fix: FixIt, fns: tuple) -> str | None:
    for name, fn in zip(fix.names, fns):
        if fn is None:
            return f"not answered yet ({name} is None)"
    return None


def check_fix(fix_id: str, *fns: Callable) -> FixResult:
    """Plant the learner's ``fns`` into the engine and replay the exercise's scenarios; the verdicts, one a line."""
    fix = FIXES[fix_id]
    head = f"fix {fix.id}: your {' + '.join(fix.names)} in the engine ({fix.where})"
    if len(fns) != len(fix.names):
        return FixResult(fix.id, [f"{head}: expected {len(fix.names)} function(s), {', '.join(fix.names)}"], False)
    if fix.cpu_only and DEVICE_TYPE != "cpu":
        return FixResult(fix.id, [f"{head}: runs its kernels under Triton's interpreter; restart with "
                                  f"MAMBALAB_DEVICE=cpu to try it"], False)
    miss = _not_answered(fix, fns)
    if miss is None and fix.probe is not None:
        try:
            miss = fix.probe(*fns)
        except NotImplementedError:
            miss = "not answered yet (it raises NotImplementedError)"
        except Exception as e:  # noqa: BLE001 - reported to the learner
            miss = f"raised {type(e).__name__}: {e}"
            if "ambiguous" in str(e):
                miss += " (a kernel passes a whole block of indices: combine with & and |, not and / or)"
    if miss is not None:
        return FixResult(fix.id, [f"{head}: {miss}"], False)
    lines, passed = [head + ":"], True
    for bug in fix.bugs:
        for seed in fix.seeds:
            verdict, records = run_planted(bug, seed, fix.plants(*fns))
            if verdict.crash is not None and "NotImplementedError" in verdict.crash.message:
                return FixResult(fix.id, [f"{head}: not answered yet (it raises NotImplementedError)"], False)
            mark = "✓" if verdict.ok else "✗"
            lines.append(f"  {mark} {bug} scenario, seed {seed}: {verdict.summary()}")
            if not verdict.ok:
                passed = False
                lines += [f"      mechanism: {s}" for s in signatures(records, verdict)[:2]]
    lines.append("  fixed: every request matches its reference in every run" if passed
                 else "  not fixed yet: the first ✗ line names the step and the request")
    return FixResult(fix.id, lines, passed)


def reveal_fix(fix_id: str, *fns: Callable) -> "Solution":
    """The solution's functions and, as its verdict, the engine's (folded in a notebook, as :func:`reveal`)."""
    from mambalab.workbook.checker import Solution

    src = "\n\n\n".join(textwrap.dedent(inspect.getsource(fn)).rstrip() for fn in fns)
    result = check_fix(fix_id, *fns)
    return Solution(fix_id, src, str(result).split("\n")[-1].strip())


# -- property checks before the engine runs --------------------------------------------------------------


def _probe_guard(is_live_slot: Callable) -> str | None:
    """A guard must let every live block through (tensors of random ids, as a kernel passes them)."""
    rng = random.Random(1)
    for _ in range(50):
        ids = torch.tensor([rng.randrange(1, 64) for _ in range(rng.randint(1, 8))])
        live = torch.as_tensor(is_live_slot(ids, NULL_BLOCK_ID))
        if live.shape not in (ids.shape, ()) or not bool(live.all()):
            return (f"is_live_slot({ids.tolist()}, 0) gave {live.tolist()}: every one of these is a live "
                    f"request's block, and a skipped one never loads or stores its state")
    return None


def _probe_mask(mask_padded_rows: Callable) -> str | None:
    """Live rows keep their flag (a live chunked prompt is a prefill); padded rows end False."""
    rng = np.random.default_rng(4)
    for _ in range(100):
        padded = int(rng.integers(1, 9))
        num_reqs = int(rng.integers(0, padded + 1))
        flags = torch.from_numpy(rng.random(padded) < 0.5)
        before = flags.clone()
        out = mask_padded_rows(flags, num_reqs)
        out = flags if out is None else torch.as_tensor(out)
        want = before.clone()
        want[num_reqs:] = False
        if out.shape != want.shape or not torch.equal(out.to(torch.bool), want):
            return (f"mask_padded_rows({before.tolist()}, num_reqs={num_reqs}) gave "
                    f"{out.tolist() if out.dim() else out.item()}: a live row (index < num_reqs) must keep "
                    f"its flag and a padded row must not say prefill")
    return None


FIXES: dict[str, FixIt] = {f.id: f for f in [
    FixIt("01.fix", ("is_live_slot",), ("pad-minus-one", "guard-lt-zero"), (0, 1), guard_plants,
          "every state kernel's guard, padding -1 and padding 0", probe=_probe_guard, cpu_only=True),
    FixIt("02.fix", ("clear_row", "dummy_run_commit"), ("stale-rows",), (0, 1, 2), stale_rows_plants,
          "InputBatch.remove_request and the dummy run"),
    FixIt("03.fix", ("spec_source_slots",), ("spec-slots/gather",), (0, 1, 2), spec_gather_plants,
          "the mixer's gather of the slots a speculative row starts from"),
    FixIt("04.fix", ("mask_padded_rows",), ("stale-is-prefilling",), (0, 1, 2), is_prefilling_plants,
          "the is_prefilling line of _build_attention_metadata", probe=_probe_mask),
]}


__all__ = ["FIXES", "FixIt", "FixResult", "LearnerError", "check_fix", "reveal_fix", "run_planted",
           "run_workload_planted", "run_workload_planted_units", "planted", "guard_plants",
           "stale_rows_plants", "is_prefilling_plants", "spec_gather_plants"]
