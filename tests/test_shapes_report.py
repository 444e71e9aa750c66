"""The model-shapes report (:mod:`mambalab.gpu.shapes_report`) on made-up runs, and on the recorded H200 run that
notebook 06 shows: every row gated and ahead of vLLM where the recorded run says so, the targets the comparison's."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from mambalab.gpu import shapes_report as sr


def _row(kernel="conv", model="Qwen3-Next-80B-A3B", tp=8, us_vllm=2.0, us=1.0, pct=50.0, active=64, captured=64,
         agree=True, after=None):
    r = dict(kernel=kernel, model=model, tp=tp, state="fp32", act="fp32", active=active, captured=captured,
             agree=agree, us_vllm=us_vllm, us=us, pct_copy_vllm=pct, pct_copy=pct * us_vllm / us)
    if after:
        r.update(us_vllm_after_torch=after[0], us_after_torch=after[1])
    return r


def _run(tmp_path, rows):
    env = dict(date="2026-11-29", device="NVIDIA H200", torch="2.11.0", triton="3.6.0", copy_gbps=4250.0,
               vllm="0.33.0", command=sr.COMMAND)
    p = tmp_path / "run.json"
    p.write_text(json.dumps(dict(environment=env, rows=rows)))
    return sr.load(p)


def test_the_target_is_the_comparisons():
    assert sr.target(_row(pct=79.9)) == 1.1 and sr.target(_row(pct=80.0)) == 1.0


def test_rows_short_of_the_target_and_behind_after_a_torch_kernel_are_listed(tmp_path):
    data = _run(tmp_path, [_row(us_vllm=2.0, us=1.9, pct=40.0),  # 1.05x where vLLM < 80%: short
                           _row(us_vllm=2.0, us=1.9, pct=90.0),  # 1.05x where vLLM >= 80%: met
                           _row(kernel="ssu", model="Falcon-H1-7B", tp=1, active=9, captured=16,
                                after=(3.0, 3.3)),  # met, behind after a torch kernel
                           _row(kernel="gdn", us=2.5, agree=False)])  # behind and gated out
    text = str(sr.summary(data))
    assert "short of the target in 2 of 4 rows:" in text
    assert "conv Qwen3-Next-80B-A3B tp8 fp32/fp32 64: 1.053x (asked 1.1x; vLLM at 40.0% of copy)" in text
    assert "gdn Qwen3-Next-80B-A3B tp8 fp32/fp32 64: 0.800x" in text
    assert "behind vLLM after a torch kernel in 1 rows:\n  ssu Falcon-H1-7B tp1 fp32/fp32 9>16: 0.91x" in text
    assert "gate failures 1; slower than vLLM in 1; 0.80x at the least" in text
    table = str(sr.table(data, "conv")).splitlines()
    assert table[2].rstrip().endswith("1.05x !          -") and table[3].rstrip().endswith("1.05x            -")
    assert "GATE" in str(sr.table(data, "gdn")) and "9>16" in str(sr.table(data, "ssu"))


def test_the_recorded_run():
    """The run chapter 06 shows: every configuration and batch of scripts/record_model_shapes.py, once, gated, on an
    H200."""
    spec = importlib.util.spec_from_file_location("record_model_shapes",
                                                  Path(__file__).parents[1] / "scripts" / "record_model_shapes.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    data = sr.load()
    assert data["environment"]["device"] == "NVIDIA H200" and data["environment"]["command"] == sr.COMMAND
    keys = [(r["kernel"], r["model"], r["tp"], r["state"], r["act"], r["active"], r["captured"]) for r in data["rows"]]
    assert sorted(keys) == sorted(c + b for c in script.configs() for b in script.BATCHES)
    assert all(r["agree"] for r in data["rows"])
    assert str(sr.provenance(data)).startswith("Recorded on NVIDIA H200")
