"""How ``make test`` spreads the suite over pytest-xdist workers (``--dist loadgroup``).

Three kinds of tests cannot be handed out one by one:

* a notebook's cells (nbval) share one kernel and must run in order, in one worker;
* the browser test builds one Chromium and one JupyterLab for its module;
* a module with a module- or session-scoped fixture of its own (DP processes
  started once, a recorded GPU report loaded once) would build it in every
  worker that gets one of its tests.

Each of those files is one work unit here; every other test is a unit of its own,
so the small tests fill in around the big units and no core idles at the end. The
big units go first, biggest first (the browser, then the notebooks, then the
grouped modules): xdist hands out units in the workers' collection order, which
:func:`order_items` sets.

This is xdist's ``loadgroup`` idea keyed on file names instead of
``xdist_group`` marks: with pytest 9.2, xdist 3.8 cannot attach a mark's group to
a test's id (it assigns ``item._nodeid``, which pytest no longer reads), so marks
would silently not group, and a notebook's cells would run in two kernels.
Both conftests (``tests/``, ``notebooks/``) load this one module.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

import pytest

BROWSER = "tests/test_browser.py"
_MODULE_FIXTURE = re.compile(r"""scope\s*=\s*["'](module|session)["']""")


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


@functools.lru_cache(maxsize=None)
def _has_module_fixture(path: Path) -> bool:
    try:
        return bool(_MODULE_FIXTURE.search(path.read_text(encoding="utf-8")))
    except OSError:
        return False


def rank(nodeid: str, rootpath: Path) -> int:
    """0 the browser test, 1 a notebook, 2 a module with a module-scoped fixture, 3 anything else."""
    f = _file(nodeid)
    if f == BROWSER:
        return 0
    if f.endswith(".ipynb"):
        return 1
    if f.endswith(".py") and _has_module_fixture(rootpath / f):
        return 2
    return 3


def scope(nodeid: str, rootpath: Path) -> str:
    """The work unit of a test: its file for ranks 0-2, else the test itself."""
    return _file(nodeid) if rank(nodeid, rootpath) < 3 else nodeid


def order_items(config: pytest.Config, items: list) -> None:
    """In an xdist worker: big units first (a stable sort: each file keeps its own order)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda it: rank(it.nodeid, config.rootpath))


def make_scheduler(config: pytest.Config, log):
    """``--dist loadgroup``: xdist's scope scheduler with :func:`scope` as the unit, in collection order."""
    if config.getoption("dist", "no") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FileGroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope(nodeid, config.rootpath)

    config.option.loadscopereorder = False  # keep order_items' order (xdist >= 3.8)
    return FileGroupScheduling(config, log)
