"""Shared pytest set-up: seeded randomness and the ``cuda`` marker."""

import random

import numpy as np
import pytest
import torch

from mambalab.device import DEVICE_TYPE


def pytest_collection_modifyitems(config, items):
    if DEVICE_TYPE == "cuda":
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run with MAMBALAB_DEVICE=cuda on the GPU machine)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


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
