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


def _pools_equal(a, b):
    import torch

    return all(torch.equal(a[k].nan_to_num(7.0), b[k].nan_to_num(7.0)) for k in a)


def test_cpu_captures_are_memoised_per_engine_content():
    """Under the interpreter a second engine of the same configuration reuses the first one's
    captures: the same pools and graph outputs as a real capture, in its own tensors."""
    import torch

    from mambalab.device import INTERPRET
    from mambalab.engine.core import Engine, EngineConfig
    from mambalab.worker import cuda_graph
    from mambalab.worker.model_runner import RunnerConfig

    if not INTERPRET:
        pytest.skip("the CPU's captures")
    memo = cuda_graph._MEMO
    cfg = EngineConfig(RunnerConfig(max_num_seqs=4, num_speculative_tokens=1), data_parallel_size=2, model_seed=11)
    memo.enabled = False
    try:
        plain = Engine(cfg)
    finally:
        memo.enabled = True
    first = Engine(cfg)
    hits = memo.hits
    second = Engine(cfg)
    assert memo.hits == hits + sum(len(r.runner.graphs) for r in second.ranks) > hits
    for p, f, s in zip(plain.ranks, first.ranks, second.ranks):
        assert _pools_equal(p.runner.state.pools, s.runner.state.pools)
        assert _pools_equal(f.runner.state.pools, s.runner.state.pools)
        for size, g in s.runner.graphs.items():
            assert torch.equal(g.output, p.runner.graphs[size].output)
            assert g.output.data_ptr() != f.runner.graphs[size].output.data_ptr()  # nothing shared
        assert s.runner.state.pools["mamba_ssm"].data_ptr() != f.runner.state.pools["mamba_ssm"].data_ptr()


def test_a_patched_function_or_a_capture_crash_is_never_answered_from_the_memo(monkeypatch):
    from mambalab.device import INTERPRET
    from mambalab.engine.core import Engine, EngineConfig
    from mambalab.lab.bugs import BugConfig
    from mambalab.lab.scenarios import run_workload, zero_accepted
    from mambalab.model import tiny_hybrid
    from mambalab.worker import cuda_graph
    from mambalab.worker.model_runner import RunnerConfig

    if not INTERPRET:
        pytest.skip("the CPU's captures")
    cfg = EngineConfig(RunnerConfig(max_num_seqs=2), model_seed=12)
    Engine(cfg)
    calls = []
    orig = tiny_hybrid.TinyHybridModel.forward_decode

    def patched(self, *a, **k):
        calls.append(1)
        return orig(self, *a, **k)

    monkeypatch.setattr(tiny_hybrid.TinyHybridModel, "forward_decode", patched)
    Engine(cfg)
    assert calls, "a patched method must run at capture, not be answered by the memo"
    monkeypatch.undo()
    # a capture that the sanitizer stops (zero-accepted: the GDN kernel reads column -1) stops every time
    for _ in range(2):
        v, _ = run_workload(zero_accepted(0), BugConfig.with_bugs("zero-accepted"))
        assert v.crash is not None and v.crash.kind == "startup" and v.crash.illegal is not None
    assert cuda_graph._MEMO.enabled
