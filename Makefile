# The two commands of the README: `make lab` opens the workbook, `make test`
# runs the whole test suite. Both create .venv and install everything first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
# The library tests and every notebook under nbval's strict mode (committed
# outputs compared after sanitizing addresses, timings and figure sizes).
NBVAL := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg

.PHONY: lab test compat bench clean browser

$(VENV)/.installed: pyproject.toml scripts/bootstrap.py
	$(PYTHON) scripts/bootstrap.py $(VENV)

lab: $(VENV)/.installed
	$(VENV)/bin/jupyter lab notebooks/

test: $(VENV)/.installed browser
	$(PY) -m pytest tests notebooks $(NBVAL) $(PYTEST_ARGS)

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
