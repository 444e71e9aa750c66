"""The notebooks' helpers (``mambalab.workbook``): deterministic text, traced replays, the bookkeeping, exercises."""

from __future__ import annotations

import base64
import html
import importlib
import sys
from pathlib import Path

import pytest
import torch

from mambalab import workbook as wb
from mambalab.lab.bugs import BugConfig
from mambalab.engine.core import Add, EngineConfig
from mambalab.worker.model_runner import RunnerConfig
from mambalab.lab.scenarios import replay
from mambalab.lab.workload import Workload

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
cpu_only = pytest.mark.cpu_only(reason="access recording needs the Triton interpreter")


def solution_module(notebook: str):
    if str(NOTEBOOKS) not in sys.path:
        sys.path.insert(0, str(NOTEBOOKS))
    return importlib.import_module(f"solutions.ex{notebook}")


# -- text -------------------------------------------------------------------------------------------


def test_fold_steps_groups_repeated_sentences_into_ranges():
    lines = ["step 3, rank 1: dummy rows point at [1]", "step 4, rank 1: dummy rows point at [1]",
             "step 5, rank 1: dummy rows point at [1]", "step 7, rank 1: dummy rows point at [1]",
             "step 9: other", "crash while capturing", "step 10, rank 1: dummy rows point at [2]"]
    assert wb.fold_steps(lines) == ["steps 3-5, 7, rank 1: dummy rows point at [1]", "step 9: other",
                                    "crash while capturing", "step 10, rank 1: dummy rows point at [2]"]
    assert wb.fold_steps([]) == []


def test_text_displays_without_quotes():
    class P:
        def __init__(self):
            self.out = []

        def text(self, s):
            self.out.append(s)

    p = P()
    t = wb.Text("a\nb")
    t._repr_pretty_(p, False)
    assert p.out == ["a\nb"] and isinstance(t, str)


def test_setup_is_deterministic_and_seeds():
    a = wb.setup(3)
    x = torch.rand(2)
    b = wb.setup(3)
    assert a == b and a.endswith("seed 3") and torch.equal(x, torch.rand(2))


def test_show_displays_png_with_the_title_as_text(monkeypatch):
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj, raw=False: shown.append((obj, raw)))
    fig = wb.MiniWorld().draw_block_table()
    wb.show(fig)
    wb.show(fig, "custom")
    (bundle, raw), (bundle2, _) = shown
    assert raw and base64.b64decode(bundle["image/png"])[:8] == b"\x89PNG\r\n\x1a\n"
    assert bundle["text/plain"] == "[figure] " + wb.figure_title(fig)
    assert bundle2["text/plain"] == "[figure] custom"
    assert "\n" not in wb.figure_title(fig)


def test_summary_of_a_replay_is_short_and_stable():
    r = replay("spec-slots/width")  # crashes at start-up: instant
    s = wb.summary_of(r)
    assert s.splitlines()[0] == "spec-slots/width (pre-fix, seed 0): exit code 1"
    assert "CRASH: at CUDA-graph capture" in s and s == wb.summary_of(replay("spec-slots/width"))
    assert all(len(line) <= 110 for line in s.splitlines())


# -- traced replays -----------------------------------------------------------------------------------


@cpu_only
def test_trace_gives_the_verdict_of_replay_and_snapshots_the_steps_asked_for():
    t = wb.trace("pad-minus-one", at=[2])
    r = replay("pad-minus-one")
    assert t.result.to_dict() == r.to_dict() and t.exit_code == 1
    assert sorted(t.snapshots) == [(2, 0)]
    snap = t.snapshot(2)
    assert snap.kind == "crashed" and snap.num_reqs == 3 and snap.num_reqs_padded == 4
    assert wb.figure_title(t.draw_metadata(2)) == "state_indices_tensor_d row 3 holds -1 (PAD_SLOT_ID)"
    amap = t.draw_access_map(2, kernel="causal_conv1d_update")
    assert wb.figure_title(amap).startswith("row 3 loaded from and stored to slot -1 (illegal")
    with pytest.raises(KeyError, match="no snapshot of step 1"):
        t.snapshot(1)


def test_trace_of_a_start_up_crash_has_no_engine():
    t = wb.trace("spec-slots/padding")
    assert t.engine is None and t.exit_code == 1 and t.verdict.crash.kind == "startup"
    assert "capture" in t.verdict.crash.describe()
    assert t.records == [] and t.tokens() == ({}, {})


@cpu_only
def test_trace_of_a_workload_draws_every_view_and_records_each_dp_rank_apart():
    rc = RunnerConfig(max_num_seqs=4, num_blocks=8)
    wl = Workload(EngineConfig(rc, data_parallel_size=2), {1: [Add("a", (1, 2, 3), 3, rank=0),
                                                               Add("b", (4, 5), 2, rank=1)]})
    t = wb.trace(wl, at=[2])
    assert t.exit_code == 0 and t.result.bug == "workload" and t.result.fixed
    s0, s1 = t.snapshot(2, 0), t.snapshot(2, 1)
    assert s0.log is not s1.log
    reads0, _ = t.accesses(2, 0)
    reads1, _ = t.accesses(2, 1)
    assert reads0 == {0: {1}} and reads1 == {0: {1}}  # each rank's own pool, its own row 0
    assert "stored slot 1: a's block" in t.writes(2, 0)
    for fig in (t.draw_block_table(2, 1), t.draw_metadata(2, 0), t.draw_state_pool(2, 0, before=2),
                t.draw_access_map(2, 1), t.draw_timeline(), t.draw_timeline(rank=1)):
        assert wb.figure_title(fig)
    assert "step  2 rank 1: b:1 [FULL" in t.steps(rank=1)


@cpu_only
def test_stale_rows_trace_names_the_cached_block_the_dummy_row_rewrites():
    t = wb.trace("stale-rows", at=[2, 3])
    assert t.exit_code == 1 and t.verdict.first.req_id == "D"
    assert t.snapshot(3, 1).kind == "dummy" and t.snapshot(3, 1).num_reqs == 0
    assert "dummy row(s) 0 stored slot 1: free, kept in the prefix cache" in t.writes(3, rank=1)
    fig = t.draw_state_pool(3, rank=1, before=2)
    # issue 17: the finding is the store by a row that owns nothing, into the cached block D will use
    assert wb.figure_title(fig).startswith(
        "row 0 (no request) stored slot 1 (free, kept in the prefix cache): not its own")
    assert [c.yaxis.label.get_text() for c in fig.axes[0].child_axes] == ["|change since step 2|"]
    assert t.block_status(3, 1, 0) == "the null block"
    assert "dummy runs (steps 3-9)" in t.draw_timeline(rank=1).axes[1].get_title(loc="left")


@cpu_only
def test_decode_slots_shows_the_gather_with_and_without_num_accepted():
    fixed = wb.trace("spec-slots", fixed=True, at=[4])
    bug = wb.trace("spec-slots/gather", at=[4])
    assert "row 0 (r0): step 3 accepted 2; gathers [3, 4], num_accepted_tokens 2 -> starts from slot 4" \
        in fixed.decode_slots(4)
    assert "row 0 (r0): step 3 accepted 2; gathers [3], no num_accepted_tokens -> starts from slot 3" \
        in bug.decode_slots(4)


# -- the bookkeeping alone ----------------------------------------------------------------------------


@pytest.mark.parametrize("bugs, kw, blocks", [
    (BugConfig.with_bugs("stale-rows"), {}, [1, 2, 0, 0]),
    (BugConfig.with_bugs("stale-rows"), {"clear_row": True}, [1, 2, 0, 0]),
    (BugConfig(), {"commit": False}, [1, 2, 0, 0]),
    (BugConfig(), {"clear_row": False}, [1, 2, 0, 0]),
    (BugConfig.with_bugs("stale-rows"), {"clear_row": True, "commit": True}, [0, 0, 0, 0]),
    (BugConfig(), {}, [0, 0, 0, 0]),
])
def test_idle_rank_reads_stale_blocks_unless_both_halves_of_the_fix(bugs, kw, blocks):
    w = wb.idle_rank(bugs, **kw)
    assert w.dummy_blocks() == blocks
    assert w.history[-1].startswith("dummy run of 4 rows")
    title = wb.figure_title(w.draw_block_table())
    assert title.startswith("all rows consistent") == (blocks == [0, 0, 0, 0])


def test_stale_is_prefilling_by_hand():
    def walk(bugs):
        w = wb.MiniWorld(bugs)
        for r in "ABD":
            w.add(r)
        w.step([1, 1, 1])
        w.add("X", prompt_len=40, computed=0)
        w.step([1, 1, 1, 32])
        w.finish("X")
        w.finish("D")
        w.condense()
        w.add("C")
        w.step([1, 1, 1])
        return w

    bug, fixed = walk(BugConfig.with_bugs("stale-is-prefilling")), walk(BugConfig())
    assert not bug.last[3].cudagraph_buffers_refreshed and fixed.last[3].cudagraph_buffers_refreshed
    assert bug.builder.state_indices_tensor_d.tolist() == [1, 2, 3, 0]
    assert fixed.builder.state_indices_tensor_d.tolist() == [1, 2, 5, 0]
    assert "  3  -               0      40  True" in bug.rows()
    assert "graph buffers NOT refreshed" in bug.history[-1]


def test_mini_world_all_mode_with_spec_decode():
    w = wb.MiniWorld(mode="all", num_spec=1, num_blocks=32)
    w.add("r0", prompt_len=9)
    desc, cm, md = w.step([2])
    assert desc.num_reqs_padded == 1 and md.cudagraph_buffers_refreshed
    assert tuple(w.builder.state_indices_tensor_d.shape) == (4, 17)
    narrow = wb.MiniWorld(BugConfig.with_bugs("spec-slots/width"), mode="all", num_spec=1)
    narrow.add("r0", prompt_len=9)
    assert wb.expect_error(narrow.step, [2]).startswith("RuntimeError: CUDA-graph capture failed")
    assert wb.expect_error(lambda: None) == "no error"


@cpu_only
def test_launch_ssu_minus_one_zero_and_the_lt_zero_guard():
    m1 = wb.launch_ssu([3, 5, 2, -1], BugConfig.with_bugs("pad-minus-one"))
    assert m1.error is not None and m1.error.slot == -1 and m1.error.index == -32
    assert "IllegalMemoryAccess in 'selective_state_update'" in m1.report()
    ok = wb.launch_ssu([3, 5, 2, 0])
    assert ok.error is None and torch.allclose(ok.state, ok.reference, rtol=3e-4, atol=1e-5)
    assert wb.figure_title(ok.draw_state_pool()) == "state pool consistent (null block 0 is zero)"
    # #39064 changed only the FLA (GDN) kernels' guard: the SSU skips index 0 either way
    assert "null block 0 after the launch: zero" in wb.launch_ssu([3, 5, 2, 0, 0, 0],
                                                                   BugConfig.with_bugs("guard-lt-zero")).report()
    lt = wb.launch_gdn([3, 5, 2, 0, 0, 0], BugConfig.with_bugs("guard-lt-zero"))
    assert "ssm_state_indices = [3, 5, 2, 0, 0, 0]" in lt.report() and "kernel guard NEGATIVE" in lt.report()
    assert "null block 0 after the launch: NOT zero" in lt.report()
    assert wb.figure_title(lt.draw_access_map()).startswith("rows 3, 4, 5 loaded from and stored to null block 0")
    fixed = wb.launch_gdn([3, 5, 2, 0, 0, 0])
    assert fixed.error is None and "null block 0 after the launch: zero" in fixed.report()
    assert torch.allclose(fixed.state, fixed.reference, rtol=1e-4, atol=1e-5)


def test_small_text_helpers():
    from mambalab.attention.metadata import build_attention_metadata

    table = wb.state_table()
    assert table.splitlines()[-1].split()[:3] == ["one", "slot", "160"]
    ex = wb.source_excerpt(build_attention_metadata, "is_prefilling[num_reqs:] = False", context=1)
    assert ex.splitlines()[-1].strip() == "is_prefilling[num_reqs:] = False"
    with pytest.raises(ValueError):
        wb.source_excerpt(build_attention_metadata, "no such text")
    assert wb.pr_link("spec-slots/gather") == "https://github.com/vllm-project/vllm/pull/41233"
    assert len(wb.tour_workload().events[1]) == 3


# -- exercises ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("eid", sorted(wb.EXERCISES))
def test_every_solution_passes_and_wrong_answers_are_named(eid):
    ex = wb.EXERCISES[eid]
    solution = getattr(solution_module(eid[:2]), ex.name)
    assert wb.check(eid, solution) == f"exercise {eid}: correct ({len(ex.cases())} cases)"

    def stub(*args):
        raise NotImplementedError

    assert wb.check(eid, stub).startswith(f"exercise {eid}: not answered yet")
    assert wb.check(eid, lambda *a: None).startswith(f"exercise {eid}: not answered yet")
    assert f"exercise {eid}: not yet: {ex.name}(" in wb.check(eid, lambda *a: "wrong")
    assert "raised ZeroDivisionError" in wb.check(eid, lambda *a: 1 / 0)
    shown = wb.reveal(eid, solution)
    assert shown.startswith(f"def {ex.name}(") and shown.endswith("correct " + f"({len(ex.cases())} cases)")


def test_exercise_cases_are_deterministic():
    for eid, ex in wb.EXERCISES.items():
        assert repr(ex.cases()) == repr(ex.cases()), eid


def test_reveal_is_a_closed_details_element_with_the_escaped_source_and_the_verdict():
    def lt_solution(xs):
        return [x for x in xs if x < 0 and "<b>" != x]  # "<", ">" and "&" to escape

    shown = wb.reveal("01.3", lt_solution)
    verdict = str(wb.check("01.3", lt_solution))
    source = 'def lt_solution(xs):\n    return [x for x in xs if x < 0 and "<b>" != x]  # "<", ">" and "&" to escape'
    assert str(shown) == f"{source}\n\n{verdict}"  # the plain text (nbval, tests) as before
    page = shown._repr_html_()
    assert page.startswith("<details") and page.endswith("</details>")
    opening = page[:page.index(">") + 1]
    assert " open" not in opening  # closed: Run All does not show the solution
    summary = page[page.index("<summary"):page.index("</summary>")]
    assert "Solution 01.3 — click to show" in summary and html.escape(verdict) in summary
    assert "lt_solution" not in summary
    assert f"<pre>{html.escape(source)}</pre>" in page
    assert "x < 0" not in page and '"<b>"' not in page


class _FakeHunt:
    """A HuntResult's report: the prose, then the snippet block from its head line on."""

    def __init__(self, text: str) -> None:
        self.text = text

    def report_parts(self, timings: bool = True) -> tuple[str, str]:
        assert timings is False
        head, sep, code = self.text.partition("As Python (runs and asserts the failure):")
        return head, sep + code


def test_hunt_report_wraps_long_lines_at_spaces_but_keeps_the_python_snippet():
    long_head = "BugConfig(x): FOUND " + " ".join(f"word{i}" for i in range(40))
    long_indented = "  => DIVERGED: " + " ".join(f"r{i}" for i in range(60))
    snippet = ("As Python (runs and asserts the failure):\n\n"
               "    workload = Workload(EngineConfig(" + ", ".join(f"k{i}={i}" for i in range(40)) + "))\n"
               "    assert not verdict.ok, verdict.summary()")
    text = "\n".join([long_head, "  short line", long_indented, "", snippet])
    out = wb.hunt_report(_FakeHunt(text))
    head, tail = out.split("As Python (runs and asserts the failure):")
    assert "As Python (runs and asserts the failure):" + tail == snippet  # verbatim, copy-and-run
    lines = head.rstrip("\n").split("\n")
    assert all(len(ln) <= 100 for ln in lines)
    assert lines[0].startswith("BugConfig(x): FOUND word0") and "  short line" in lines
    first = lines.index("  short line")
    assert all(ln.startswith("    ") for ln in lines[1:first])  # hanging indent of the unindented line
    cont = lines[first + 2:]
    assert lines[first + 1].startswith("  => DIVERGED: r0") and cont and all(ln.startswith("      r") for ln in cont)
    assert " ".join(" ".join(lines).split()) == " ".join(text.split("As Python")[0].split())  # no word split
    assert wb.hunt_report(_FakeHunt("short\n  lines")) == "short\n  lines"


def test_workload_steps_is_the_step_list_wrapped():
    import random

    from mambalab.lab.hunt_generator import random_hunt_workload, workload_seed
    from mambalab.lab.hunt_report import step_list

    w = random_hunt_workload(random.Random(workload_seed(1, 0)))
    text = wb.workload_steps(w, width=60)
    assert all(len(ln) <= 60 or " " not in ln.strip() for ln in text.split("\n"))
    assert " ".join(text.split()) == " ".join(" ".join(step_list(w)).split())  # the same words, none split
    assert text.split("\n")[0].startswith("engine: DP")


def test_trace_draws_a_prefilling_live_row_in_a_full_graph_step_as_a_replay():
    # #42430's step: the FULL decode graph replays while X's one-token chunk is classified as a prefill.
    # The drawing takes the step's mode from its record (not inferred from "no live row prefills").
    t = wb.trace("single-token-extend", at=[5])
    assert t.snapshot(5).record.mode == "FULL"
    title = wb.figure_title(t.draw_metadata(5))
    assert title.startswith("row 2 replays") and "no FULL graph" not in title, title
    fixed = wb.trace("single-token-extend", fixed=True, at=[5])
    assert wb.figure_title(fixed.draw_metadata(5)) == "3 decodes + 1 padded row, 0 prefills: graph buffers refreshed"


# -- issue 17: drawn, not told ----------------------------------------------------------------------


def test_cuda_graph_demo_replays_a_stale_buffer_when_a_copy_is_skipped():
    demo = wb.cuda_graph_demo(device="cpu")
    assert [s.copied for s in demo.steps] == [True, True, False]
    assert [s.output for s in demo.steps] == [(11, 21, 31), (41, 51, 61), (41, 51, 61)]
    assert demo.stale_steps == [3] and demo.steps[2].buffer == (4, 5, 6)
    text = str(demo)
    assert "step 3: inputs [7, 8, 9] -> copy SKIPPED, replay: graph read x = [4, 5, 6]" in text
    assert "STALE" in text.splitlines()[-1] and "STALE" not in "\n".join(text.splitlines()[:-1])
    assert len(demo.code.splitlines()) <= 12 and "copy_" in demo.code and "replay()" in demo.code
    # the replay reads the buffer, not the inputs: skipping the first refresh replays the capture's zeros
    from mambalab.workbook.graph_demo import graph_steps

    assert graph_steps([([5, 6], False), ([7, 8], True)], device="cpu") == [([0, 0], [1, 1]), ([7, 8], [71, 81])]


@cpu_only
def test_trace_draws_one_requests_speculative_columns():
    t = wb.trace("spec-slots", fixed=True, at=[4])
    fig = t.draw_spec_columns(4, row=0)
    assert wb.figure_title(fig) == ("r0: starts from column 3 (block 4) = anchor 2 + num_accepted_tokens 2 - 1; "
                                    "writes columns 3, 4")
    texts = [x.get_text() for x in fig.axes[0].texts]
    assert "gather window: anchor 2 + arange(2)" in texts and "t=0" in texts and "t=1" in texts
    hatched = [p for p in fig.axes[0].patches if getattr(p, "get_hatch", lambda: None)() == "//"]
    assert len(hatched) == 1  # the one column (+ num_speculative_blocks) the pre-fix buffer lacks
    with pytest.raises(ValueError):
        wb.trace("stale-rows", at=[3]).draw_spec_columns(3, rank=1)


@cpu_only
def test_timeline_of_a_dp_run_names_steps_ranks_and_draws_the_dummy_batches():
    t = wb.trace("stale-rows", at=[3])
    fig = t.draw_timeline()
    strip = fig.axes[1]
    labels = [x.get_text() for x in strip.get_yticklabels()]
    assert "C · rank 0" in labels and "D · rank 1" in labels and "dummy batch · rank 1" in labels
    assert any(x.get_text().startswith("step (ranks 0, 1") for x in strip.texts)
    steps = [x.get_text() for x in strip.texts if x.get_text().isdigit() and x.get_va() == "top"]
    assert steps == [str(i) for i in range(1, len(steps) + 1)]  # one column per step, in order
    one = t.draw_timeline(rank=1)
    assert any(x.get_text() == "step (rank 1)" for x in one.axes[1].texts)


def test_fold_shows_the_summary_as_text_and_the_full_text_behind_a_click():
    text = "\n".join([f"line {i}: ok" for i in range(30)] + ["ERROR SUMMARY: 3 errors", "line 30: <b>&", "ERROR SUMMARY: 3 errors"])
    f = wb.fold(text, "the report", keep=("ERROR",))
    assert str(f) == "the report\nERROR SUMMARY: 3 errors\n(33 lines folded: expand to read them)"  # each line once
    page = f._repr_html_()
    assert page.count("<details>") == 1 and "<details open" not in page
    assert "line 30: &lt;b&gt;&amp;" in page and "line 29: ok" in page  # the whole text, escaped
    assert "line 29" not in str(f)
    assert str(wb.fold("a\nb", "t")) == "t\n(2 lines folded: expand to read them)"


@pytest.mark.cuda
def test_cuda_graph_demo_with_a_real_cuda_graph_says_the_same():
    demo = wb.cuda_graph_demo(device="cuda")
    assert demo.real_cuda_graph
    assert str(demo) == str(wb.cuda_graph_demo(device="cpu"))  # the notebook's output on either machine


@cpu_only
def test_trace_state_pool_of_a_last_step_is_consistent_and_a_stale_replay_is_not():
    tour = wb.trace(wb.tour_workload(), at=[4])  # every request finishes in step 4: its block is freed after it
    assert wb.figure_title(tour.draw_state_pool(4)) == \
        "state pool consistent (every row stored only its own request's slots)"
    sip = wb.trace("stale-is-prefilling", at=[4])  # the graph replays D's freed slot for C
    assert wb.figure_title(sip.draw_state_pool(4)).startswith("row 2 (C) stored slot 3 (free): not its own")
