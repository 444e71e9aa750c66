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
