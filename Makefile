# The two set-up commands: `make demo` and `make test`. Both create .venv when missing. `make docs` builds the site.
VENV ?= .venv
PY := $(VENV)/bin/python
# --no-compile: no bytecode for every installed file up front (torch alone: 34 s -> 10 s here); modules are compiled
# when first imported
PIP := $(PY) -m pip install -q --no-compile -c constraints.txt

.PHONY: demo test test-fast test-slow lint lint-imports docs docs-serve clean

$(VENV)/.installed: pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --no-compile torch==2.13.0
	$(PIP) -e ".[test]"
	touch $@

demo: $(VENV)/.installed
	$(PY) -m hypermappo.demo

# one pytest worker per core, at most 4 (each compiles its own graphs: ~1 GB), tests handed out as workers free up,
# one at a time (--maxschedchunk 1), those that compile Inductor graphs first and heaviest first (tests/conftest.py),
# so that no worker is left compiling alone at the end.
# `make test` (CI) runs every test; `make test-fast` leaves out those marked slow (compiled-path variants that each
# compile their own Inductor graph set, minutes apiece) for quick local iterations, `make test-slow` runs only them.
TEST_WORKERS ?= auto --maxprocesses 4
PYTEST := $(PY) -m pytest -n $(TEST_WORKERS) --dist load --maxschedchunk 1 --durations=20
test: lint-imports
	$(PYTEST)

test-fast: lint-imports
	$(PYTEST) -m "not slow"

test-slow: $(VENV)/.installed
	$(PYTEST) -m slow

# the package's layers and no import cycles (pyproject.toml, [tool.importlinter]); about a second
lint-imports: $(VENV)/.installed
	$(VENV)/bin/lint-imports --no-cache

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check src tests benchmarks

# the documentation site, built with every warning an error into site/; its reference and benchmark pages are
# generated on each build from the code and benchmarks/results/ (docs/gen_ref.py, a MkDocs hook)
$(VENV)/.docs-installed: $(VENV)/.installed
	$(PIP) -e ".[docs]"
	touch $@

docs: $(VENV)/.docs-installed
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

docs-serve: $(VENV)/.docs-installed
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve

clean:
	rm -rf $(VENV) runs report site build
