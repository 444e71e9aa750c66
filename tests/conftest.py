"""Shared pytest set-up: seeded randomness, the ``cuda`` and ``cpu_only`` markers."""

import random

import numpy as np
import pytest
import torch

from mambalab.device import DEVICE_TYPE


def pytest_collection_modifyitems(config, items):
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
