"""nbval settings for the workbook's notebooks.

stderr is not compared: torch and Triton may print warnings that depend on
versions, not on what a cell teaches. Everything a cell shows on purpose goes
to stdout or to a display (compared in strict mode).
"""


def pytest_collectstart(collector):
    if getattr(collector, "fspath", None) is not None and str(collector.fspath).endswith(".ipynb"):
        collector.skip_compare += ("stderr",)
