"""Notebook 05's folded hunt report (workbook.bug_hunt.hunt_summary): the gist shown, the whole report
behind a click; its text/plain short and stable (nbval compares it). Headless, no engine run."""

from mambalab.workbook.bug_hunt import hunt_report, hunt_summary

FOUND = """(workload 3, seed 30: divergence, but the fixed engine fails it too (CRASH: x); not counted)
BugConfig(pre-fix: stale-rows): FOUND after 4 workload(s) (seed 3, workload seed 3000010): divergence
  DIVERGED: step 8: request r5 (rank 0) output token #1: expected 4, got 1 (3 request(s) differ)
  original workload: 8 request(s), 15 engine steps
  shrunk in 41 runs, to 3 request(s), 6 engine steps:

Minimal reproduction:
  engine: DP 2, mamba_cache_mode 'all', max_num_seqs 1
  step 1: add r4 on rank 0, prompt [29, 5, 12, 12], max_tokens 2
  step 6: add r5 on rank 0, prompt [29, 5, 12, 12, 29], max_tokens 1
  => DIVERGED: step 6: request r5 (rank 0) output token #0: expected 21, got 22 (1 request(s) differ)
  with every fix: OK: every request matches its reference (6 steps)
"""
SNIPPET = "As Python (runs and asserts the failure):\n\n    workload = Workload(...)\n    assert not verdict.ok"


class _Hunt:
    def __init__(self, head: str, snippet: str = ""):
        self.head, self.snippet = head, snippet

    def report_parts(self, timings: bool = True):
        assert timings is False  # the notebook shows no timings
        return self.head, self.snippet


def test_found_hunt_is_summarised_with_the_full_report_folded():
    f = hunt_summary(_Hunt(FOUND, SNIPPET))
    plain = f.summary()
    assert plain.splitlines()[0].startswith("BugConfig(pre-fix: stale-rows): FOUND after 4 workload(s)")
    for line in ("  DIVERGED: step 8", "  original workload: 8 request(s)", "  shrunk in 41 runs",
                 "  => DIVERGED: step 6", "  with every fix: OK", "(workload 3, seed 30"):
        assert any(x.startswith(line) for x in plain.splitlines()), line
    assert "step 1: add r4" not in plain and "Workload(" not in plain  # the reproduction is folded
    assert len(plain.splitlines()) <= 8 < len(str(hunt_report(_Hunt(FOUND, SNIPPET))).splitlines())
    html = f._repr_html_()
    assert "<details>" in html and "step 1: add r4 on rank 0" in html and "Workload(...)" in html
    assert f.text == str(hunt_report(_Hunt(FOUND, SNIPPET)))  # the whole report, as the unfolded helper gives it
    assert hunt_summary(_Hunt(FOUND, SNIPPET)) == f  # the same hunt, the same output


def test_clean_hunt_summary_is_its_one_line():
    line = "BugConfig(all fixed): 3 random workloads, seed 1: nothing found"
    f = hunt_summary(_Hunt(line))
    assert f.title == line and f.kept == ()
