# The two commands of the README: `make lab` opens the workbook, `make test`
# runs the whole test suite. Both create .venv and install everything first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
# The library tests and every notebook under nbval's strict mode (committed
# outputs compared after sanitizing addresses, timings and figure sizes).
NBVAL := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg

.PHONY: lab test compat bench clean

$(VENV)/.installed: pyproject.toml scripts/bootstrap.py
	$(PYTHON) scripts/bootstrap.py $(VENV)

lab: $(VENV)/.installed
	$(VENV)/bin/jupyter lab notebooks/

test: $(VENV)/.installed
	$(PY) -m pytest tests notebooks $(NBVAL) $(PYTEST_ARGS)

# The interpreter-facing tests again under the oldest supported Triton (3.6).
compat: $(VENV)/.installed
	$(PY) scripts/compat.py

bench: $(VENV)/.installed
	$(PY) -m mambalab bench

clean:
	rm -rf $(VENV) .pytest_cache
