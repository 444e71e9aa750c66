"""On a GPU, every replay gives the same verdict with real CUDA graphs as on the CPU interpreter.

Each replay runs in its own process (a real illegal address ruins the CUDA
context of the process that made it). Run on the GPU machine:
``MAMBALAB_DEVICE=cuda python -m pytest tests/test_gpu_parity.py``.
"""

import json
import subprocess
import sys

import pytest

from mambalab.scenarios import valid_bug_ids


def verdict(bug, device, fixed, seed=0):
    args = [sys.executable, "-m", "mambalab", "replay", bug, "--device", device, "--json", "--seed", str(seed)]
    if fixed:
        args.append("--fixed")
    r = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert r.returncode in (0, 1), r.stderr[-2000:]
    return r.returncode, json.loads(r.stdout)


def kind(v: dict) -> str:
    if v["verdict"]["illegal"]:
        return "illegal"
    if v["verdict"]["crash"]:
        return "crash"
    return "ok" if v["ok"] else "diverged"


@pytest.mark.cuda
@pytest.mark.parametrize("fixed", [False, True])
@pytest.mark.parametrize("bug", valid_bug_ids())
def test_same_verdict_on_cpu_and_gpu(bug, fixed):
    rc_cpu, cpu = verdict(bug, "cpu", fixed)
    rc_gpu, gpu = verdict(bug, "cuda", fixed)
    assert rc_cpu == rc_gpu, (cpu["verdict"]["summary"], gpu["verdict"]["summary"])
    if bug == "pad-minus-one" and not fixed:
        # CPU: the sanitizer names slot -1. GPU: the -1 row is a real out-of-pool access; whether
        # the hardware faults depends on what lies before the pool, so either outcome is a failure.
        assert kind(cpu) == "illegal" and kind(gpu) in ("illegal", "diverged", "crash")
        return
    assert kind(cpu) == kind(gpu), (cpu["verdict"]["summary"], gpu["verdict"]["summary"])
    first_cpu, first_gpu = cpu["verdict"]["divergences"], gpu["verdict"]["divergences"]
    if first_cpu:
        assert {d["req_id"] for d in first_cpu} == {d["req_id"] for d in first_gpu}
