import os
import subprocess
import sys

import pytest


def run(env_value, code="import mambalab.device as d; print(d.DEVICE_TYPE, d.INTERPRET, __import__('os').environ.get('TRITON_INTERPRET'))"):
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    if env_value is None:
        env.pop("MAMBALAB_DEVICE", None)
    else:
        env["MAMBALAB_DEVICE"] = env_value
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)


def test_cpu_override_sets_interpreter_before_kernels():
    r = run("cpu")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["cpu", "True", "1"]


def test_bad_value_is_a_clear_error():
    r = run("tpu")
    assert r.returncode != 0 and "MAMBALAB_DEVICE='tpu'" in r.stderr


def test_automatic_choice_matches_torch():
    import torch

    r = run(None)
    expect = "cuda" if torch.cuda.is_available() else "cpu"
    assert r.stdout.split()[0] == expect


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="CPU-only check")
def test_cuda_without_gpu_is_a_clear_error():
    r = run("cuda")
    assert r.returncode != 0 and "no CUDA device" in r.stderr
