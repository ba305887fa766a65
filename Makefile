# The two set-up commands: `make demo` and `make test`. Both create .venv when missing.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install -q -c constraints.txt

.PHONY: demo test lint lint-imports clean

$(VENV)/.installed: pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q torch==2.13.0
	$(PIP) -e ".[test]"
	touch $@

demo: $(VENV)/.installed
	$(PY) -m hypermappo.demo

# one pytest worker per core, at most 4 (each compiles its own graphs: ~1 GB), tests handed out as workers free up
TEST_WORKERS ?= auto --maxprocesses 4
test: lint-imports
	$(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal

# the package's layers and no import cycles (pyproject.toml, [tool.importlinter]); about a second
lint-imports: $(VENV)/.installed
	$(VENV)/bin/lint-imports --no-cache

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check src tests benchmarks

clean:
	rm -rf $(VENV) runs report
