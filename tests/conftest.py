"""Shared pytest set-up: seeded randomness, the ``cuda`` and ``cpu_only`` markers, the ``slow`` subset
left out of ``make test-fast``, and the pytest-xdist work units (``tests/xdist_groups.py``)."""

import os
import random

import numpy as np
import pytest
import torch
import xdist_groups  # tests/xdist_groups.py: how `make test` spreads the suite over xdist workers

from mambalab.device import DEVICE_TYPE

# One torch thread per test process: every tensor here is tiny, `make test` runs one xdist worker
# per core, and on a busy two-core machine a 2-thread torch spends ~300 us waking its pool for a
# 4x16 matmul that takes 12 us on one thread (docs/speed.md). OMP_NUM_THREADS, if set, wins.
if "OMP_NUM_THREADS" not in os.environ:
    torch.set_num_threads(1)

# Left out of `make test-fast` (a contributor's quick check); `make test` runs them all. Whole
# files, or (file, test-function prefix). Each entry costs tens of seconds or more on two cores:
# real browsers and notebook kernels, engine replays of every scenario and seed, the hunter's
# find-and-shrink runs, DP ranks as processes (docs/speed.md has the measured durations).
SLOW = {
    "test_browser.py": None,
    "test_notebooks.py": None,
    "test_notebooks_cuda.py": None,
    "test_hunt.py": None,
    "test_hunt_worker.py": None,
    "test_hunt_pool.py": ("test_hunt_with_jobs", "test_a_worker_started"),  # worker processes, real hunts
    "test_dp_processes.py": None,
    "test_dp_gpus.py": None,
    "test_cuda_verdicts.py": None,
    "test_scenarios.py": None,
    "test_cli.py": None,
    "test_reference_pool_kernel.py": None,  # a Jupyter kernel with the reference pool's worker (~7 s)
    "test_exercises_fix_it.py": None,  # each check replays a bug's scenario over seeds (~60 s)
    "test_exercises_predict.py": ("test_the_truth_is_right", "test_known_truths"),  # truths replay scenarios
    "test_engine.py": ("test_fixed_engine_matches_reference",),
    "test_layout.py": ("test_every_module_imports_alone",),  # a fresh interpreter per module (25 s)
    "test_workbook.py": ("test_every_solution_passes", "test_trace_", "test_stale_rows_trace",
                         "test_idle_rank_reads", "test_mini_world"),
}


def _slow(item) -> bool:
    path = getattr(item, "path", None)
    if path is None or path.name not in SLOW:
        return False
    prefixes = SLOW[path.name]
    return prefixes is None or item.name.startswith(prefixes)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if _slow(item):
            item.add_marker(pytest.mark.slow)
    _skip_for_device(items)
    xdist_groups.order_items(config, items)


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook (the compat venv runs without xdist)
def pytest_xdist_make_scheduler(config, log):
    return xdist_groups.make_scheduler(config, log)


def _skip_for_device(items):
    if DEVICE_TYPE == "cuda":
        # What the CPU's memory sanitizer stops is, on a GPU, a silent divergence or a real fault that
        # breaks the CUDA context of the test process (and every later test in it); the same runs are
        # compared across devices, each in its own process, by tests/test_cuda_verdicts.py.
        # ``@pytest.mark.cpu_only(reason=...)`` says why a test is meaningful only there.
        marker = "cpu_only"
        default = "checks what the CPU interpreter's sanitizer reports (on CUDA: tests/test_cuda_verdicts.py)"
    else:
        marker = "cuda"
        default = "needs a CUDA GPU (run with MAMBALAB_DEVICE=cuda on the GPU machine)"
    for item in items:
        mark = item.get_closest_marker(marker)
        if mark is not None:
            item.add_marker(pytest.mark.skip(reason=mark.kwargs.get("reason", default)))


@pytest.fixture
def no_launch_memo():
    """Every launch really runs: for tests of the interpreter's and the sanitizer's own work per launch
    (``lab/launch_memo.py`` would serve a repeated launch without it)."""
    from mambalab.lab import launch_memo

    with launch_memo.disabled():
        yield


@pytest.fixture
def memo(monkeypatch):
    """A fresh launch memo (``lab/launch_memo.py``) in place of the process's one, on even where the environment
    turns it off (the memo's own tests)."""
    from mambalab.lab import launch_memo

    m = launch_memo.LaunchMemo()
    m.enabled = True
    monkeypatch.setattr(launch_memo, "MEMO", m)
    return m


@pytest.fixture(autouse=True)
def _seed_everything():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    yield


def pytest_terminal_summary(terminalreporter):
    """List the browser test's screenshots and timings (its ``record_property`` values), with or without ``-s``."""
    found: dict[str, set] = {"screenshot": set(), "timing": set()}
    for reports in terminalreporter.stats.values():
        for rep in reports:
            if getattr(rep, "when", None) == "call":
                for k, v in getattr(rep, "user_properties", ()):
                    if k in found:
                        found[k].add(v)
    for key, title in (("timing", "browser timings"), ("screenshot", "browser screenshots")):
        if found[key]:
            terminalreporter.section(title)
            for line in sorted(found[key]):
                terminalreporter.write_line(line)
