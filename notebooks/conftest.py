"""nbval settings for the workbook's notebooks.

stderr is not compared: torch and Triton may print warnings that depend on
versions, not on what a cell teaches. Everything a cell shows on purpose goes
to stdout or to a display (compared in strict mode).

Under pytest-xdist (``make test``: ``--dist loadgroup``) a notebook's cells
run in one kernel, in order: each notebook is one work unit that one worker
runs whole (``tests/xdist_groups.py``, loaded here too, so that ``pytest
notebooks -n 2 --dist loadgroup`` alone groups them as well), and several
notebooks run at once in different workers.
"""

import importlib.util
import sys
from pathlib import Path

import pytest


def _xdist_groups():
    name = "xdist_groups"
    if name not in sys.modules:
        path = Path(__file__).resolve().parent.parent / "tests" / "xdist_groups.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


xdist_groups = _xdist_groups()


def pytest_collectstart(collector):
    if getattr(collector, "fspath", None) is not None and str(collector.fspath).endswith(".ipynb"):
        collector.skip_compare += ("stderr",)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        path = getattr(item, "path", None)
        if path is not None and path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)  # `make test-fast` runs no notebook
    xdist_groups.order_items(config, items)


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook (firstresult: one conftest's answer is used)
def pytest_xdist_make_scheduler(config, log):
    return xdist_groups.make_scheduler(config, log)
