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


def test_one_torch_thread_under_the_interpreter_unless_omp_says():
    code = "import mambalab.device, torch; print(torch.get_num_threads())"
    env = dict(os.environ, MAMBALAB_DEVICE="cpu")
    env.pop("OMP_NUM_THREADS", None)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1"]
    env["OMP_NUM_THREADS"] = "2"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.stdout.split() == ["2"]


def test_overflow_asserts_off_only_inside_and_nested():
    from mambalab.device import INTERPRET, without_overflow_asserts

    if not INTERPRET:
        pytest.skip("the interpreter's option")
    import triton.runtime.interpreter as interpreter

    b = interpreter.interpreter_builder
    before = b.options.sanitize_overflow
    with without_overflow_asserts():
        assert b.options.sanitize_overflow is False
        with without_overflow_asserts():
            assert b.options.sanitize_overflow is False
        assert b.options.sanitize_overflow is False
    assert b.options.sanitize_overflow == before


def test_engine_runs_without_overflow_asserts_and_restores_them():
    from mambalab.device import INTERPRET
    from mambalab.engine.core import Add, Engine, EngineConfig
    from mambalab.worker.model_runner import RunnerConfig

    if not INTERPRET:
        pytest.skip("the interpreter's option")
    import triton.runtime.interpreter as interpreter

    b = interpreter.interpreter_builder
    before = b.options.sanitize_overflow
    seen = []
    eng = Engine(EngineConfig(RunnerConfig(max_num_seqs=2)))
    runner = eng.ranks[0].runner
    orig = runner.model.forward_decode

    def spy(*a, **k):
        seen.append(b.options.sanitize_overflow)
        return orig(*a, **k)

    runner.model.forward_decode = spy
    eng.schedule_events({1: [Add("r0", (1, 2, 3), 2)]})
    eng.run()
    assert seen and not any(seen)
    assert b.options.sanitize_overflow == before
