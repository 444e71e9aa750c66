"""gpu.run_spread: a row read in several recordings, its lowest / median / highest ratio and its verdict in each run."""

from __future__ import annotations

from pathlib import Path

import pytest

from mambalab.gpu import gpu_report as gr
from mambalab.gpu import run_spread as rs
from mambalab.gpu.bench import Row

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
KW = dict(act="bf16", z="none", pools="cloned")


def _pair(batch, ml_us, vl_us, vl_pct, ml_nb=None, vl_nb=None):
    return [Row("ssu", "mambalab", "fp32", batch, batch, ml_us, 0.0, 80.0, "skip", us_after_torch=ml_nb, **KW),
            Row("ssu", "vllm", "fp32", batch, batch, vl_us, 0.0, vl_pct, "skip", us_after_torch=vl_nb, **KW)]


def _run(*pairs, date="2026-11-29"):
    return gr.BenchData({"date": date}, 4000.0, [r for p in pairs for r in p])


@pytest.fixture
def runs():
    # batch 8: 1.12x then 1.09x with vLLM at 70% (met once); batch 4: 1.05x both, vLLM at 79% then 81% of copy (the
    # target 1.1x then 1x: met once); batch 64: 1.2x both; batch 2 only in the first run.
    first = _run(_pair(8, 10.0, 11.2, 70.0, 5.0, 4.95), _pair(4, 10.0, 10.5, 79.0), _pair(64, 10.0, 12.0, 85.0),
                 _pair(2, 1.0, 2.0, 50.0))
    second = _run(_pair(8, 10.0, 10.9, 70.0, 5.0, 5.05), _pair(4, 10.0, 10.5, 81.0), _pair(64, 10.0, 12.0, 85.0))
    return [first, second]


def test_each_row_is_read_in_every_run_with_that_runs_target(runs):
    rows = {r["batch"]: r for r in rs.spread_rows(runs)}
    assert sorted(rows) == [4, 8, 64]  # batch 2 is in one run only
    b8 = rows[8]
    assert b8["ratios"] == pytest.approx([1.12, 1.09]) and b8["lo"] == pytest.approx(1.09)
    assert b8["hi"] == pytest.approx(1.12) and b8["median"] == pytest.approx(1.105)
    assert b8["met"] == 1 and b8["ahead"] == 2
    assert b8["after"] == pytest.approx([0.99, 1.01]) and b8["behind_after"] == 1
    assert rows[4]["needs"] == [1.1, 1.0] and rows[4]["met"] == 1
    assert rows[64]["met"] == 2 and rows[64]["after"] is None and rows[64]["behind_after"] == 0


def test_the_median_of_three_runs_and_one_run_refused(runs):
    third = _run(_pair(8, 10.0, 11.5, 70.0), _pair(4, 10.0, 10.5, 79.0), _pair(64, 10.0, 12.0, 85.0))
    b8 = {r["batch"]: r for r in rs.spread_rows(runs + [third])}[8]
    assert b8["median"] == pytest.approx(1.12) and b8["hi"] == pytest.approx(1.15) and b8["met"] == 2
    assert b8["after"] is None  # the third run did not time it after a torch kernel
    with pytest.raises(ValueError, match="two runs"):
        rs.spread_rows(runs[:1])


def test_runs_on_different_cards_or_versions_are_refused(runs):
    other = gr.BenchData({**runs[1].environment, "device": "NVIDIA H100 80GB HBM3"}, 4000.0, runs[1].rows)
    with pytest.raises(ValueError, match="device"):
        rs.spread_rows([runs[0], other])
    older = gr.BenchData({**runs[1].environment, "vllm": "0.32.0"}, 4000.0, runs[1].rows)
    with pytest.raises(ValueError, match="vllm"):
        rs.spread_rows([runs[0], older])


def test_summary_and_table_say_which_verdicts_move(runs):
    summary = str(rs.spread_summary(runs))
    assert "2 runs (2026-11-29, 2026-11-29); 3 rows in every run" in summary
    assert "target met in every run 1, in some 2, in none 0; ahead of vLLM in every run 3" in summary
    assert "after a torch kernel (1 rows) behind in every run 0, in some 1" in summary
    assert "largest +2.8% (ssu state=fp32 act=bf16 z=none pools=cloned at 8)" in summary
    table = str(rs.spread_table(runs)).splitlines()
    rows = [line for line in table if line.startswith("ssu")]
    assert any(line.split()[5] == "8" and line.endswith("1/2") for line in rows)
    assert any(line.split()[5] == "4" and "1.0x/1.1x" in line for line in rows)
    assert sum(" 64 " in line for line in rows) == 0  # 1.2x where 1x is asked: far from its line
    assert "behind in 1/2" in table[-1]


def test_a_row_met_in_every_run_is_listed_only_near_its_line(runs):
    near = [line for line in str(rs.spread_table(runs, near=0.25)).splitlines() if line.startswith("ssu")]
    assert any(line.split()[5] == "64" for line in near)  # 1.2x is within 25% of 1x


def test_the_recordings_of_calls_293_and_294(capsys):
    runs = [gr.load(RESULTS / "issue14-call293-recording-h200.json"), gr.load(gr.RECORDED_VLLM_BENCH)]
    rows = {(r["config"], r["batch"], r["captured"]): r for r in rs.spread_rows(runs)}
    assert len(rows) == 251
    bf16_9 = rows[("ssu state=bf16 act=bf16 z=none pools=cloned", 9, 9)]
    assert bf16_9["met"] == 1 and bf16_9["lo"] == pytest.approx(bf16_9["ratios"][1])  # met in 293 only
    assert rows[("gdn state=bf16 act=bf16 pools=cloned", 64, 64)]["met"] == 0
    assert all(r["ahead"] == 2 for r in rows.values())
    assert rs.main([str(RESULTS / "issue14-call293-recording-h200.json"), str(gr.RECORDED_VLLM_BENCH)]) == 0
    out = capsys.readouterr().out
    assert "251 rows in every run" in out and "behind vLLM in some run (15 rows)" in out


def test_the_installed_recording_and_its_repeats_have_the_same_rows_and_card():
    import hashlib

    installed = hashlib.sha256(gr.RECORDED_VLLM_BENCH.read_bytes()).hexdigest()
    assert installed.startswith(rs.REPEATS_OF), "a new recording: record its repeats too"
    runs = rs.recorded_runs()
    assert len(runs) == 3
    keys = [sorted((r["config"], r["batch"], r["captured"]) for r in gr.comparison_rows(d)) for d in runs]
    assert keys[0] == keys[1] == keys[2] and len(keys[0]) == 251
    envs = [d.environment for d in runs]
    for field in ("device", "date", "torch", "triton", "vllm"):
        assert len({e[field] for e in envs}) == 1, field
    # three runs, not one file thrice: the rows' times differ
    assert len({tuple(r.us for r in d.rows) for d in runs}) == 3
    rows = rs.spread_rows(runs)
    assert all(r["ahead"] == 3 for r in rows)


def test_chapter_06_says_what_the_recorded_runs_say():
    """The prose under chapter 06's spread cell quotes these numbers; they must be the recorded runs'."""
    import nbformat

    nb = nbformat.read(Path(__file__).resolve().parents[1] / "notebooks" / "06_gpu.ipynb", as_version=4)
    i = next(i for i, c in enumerate(nb.cells) if "rsp.spread_summary(runs)" in c.source)
    prose = " ".join(nb.cells[i + 1].source.split())
    runs = rs.recorded_runs()
    rows = rs.spread_rows(runs)
    moves = sorted(r["hi"] / r["lo"] - 1.0 for r in rows)
    least = min(r["lo"] for r in rows)
    flips = [r for r in rows if 0 < r["met"] < 3]
    never = [r for r in rows if r["met"] == 0]
    short = [sum(not r["met"] for r in gr.comparison_rows(d)) for d in runs]
    behind_every = sum(r["behind_after"] == 3 for r in rows)
    behind_some = sum(0 < r["behind_after"] < 3 for r in rows)
    assert f"({least:.3f}× at the least)" in prose
    assert f"by {moves[len(moves) // 2]:.1%} between runs at the median and by {moves[-1]:.1%} at most" in prose
    assert len(flips) == 4 and "Four rows change verdict" in prose
    assert len(never) == 20 and "Twenty rows miss in every run" in prose
    assert short == [24, 21, 20] and "Section 7's count, 24, is the worst of the three runs (21 and 20" in prose
    assert (behind_every, behind_some) == (14, 1) and "14 rows are behind vLLM in every run, and one more" in prose
