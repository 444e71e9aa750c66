# The two commands of the README: `make lab` opens the workbook, `make test`
# runs the whole test suite. Both create .venv and install everything first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
# The suite runs across the CPU cores with pytest-xdist (one worker per core; PYTEST_WORKERS=0
# runs it in this process). --dist loadgroup, as tests/xdist_groups.py implements it: a notebook's
# cells (one kernel, run in order), the browser test (one JupyterLab) and each module with a
# module-scoped fixture are one unit that one worker runs whole; every other test is a unit of
# its own. The big units are handed out first (browser, notebooks), so they run beside each other
# while the hundreds of small tests fill in around them, and no core idles at the end behind one
# long file (as --dist loadfile would leave it behind test_kernel_*.py).
PYTEST_WORKERS ?= auto
XDIST := -n $(PYTEST_WORKERS) --dist loadgroup
# The library tests and every notebook under nbval's strict mode (committed
# outputs compared after sanitizing addresses, timings and figure sizes).
NBVAL := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg

.PHONY: lab test test-fast compat bench clean browser

$(VENV)/.installed: pyproject.toml scripts/bootstrap.py
	$(PYTHON) scripts/bootstrap.py $(VENV)

lab: $(VENV)/.installed
	$(VENV)/bin/jupyter lab notebooks/

test: $(VENV)/.installed browser
	$(PY) -m pytest tests notebooks $(NBVAL) $(XDIST) $(PYTEST_ARGS)

# A contributor's quick check (under 3 minutes on two cores): the library tests without the ones
# marked slow in tests/conftest.py (the browser, the notebooks under nbval, the hunter's
# find-and-shrink runs, the DP process groups ...). `make test` runs everything.
test-fast: $(VENV)/.installed
	$(PY) -m pytest tests -m "not slow" $(XDIST) $(PYTEST_ARGS)

# Debian's chromium (and fonts) for tests/test_browser.py, installed with apt-get where missing (as root);
# checked on every run, instant when present. MAMBALAB_SKIP_BROWSER=1 skips the browser test instead.
browser:
	$(PYTHON) scripts/bootstrap.py --chromium

# The interpreter-facing tests again under the oldest supported Triton (3.6).
compat: $(VENV)/.installed
	$(PY) scripts/compat.py

bench: $(VENV)/.installed
	$(PY) -m mambalab bench

clean:
	rm -rf $(VENV) .pytest_cache
