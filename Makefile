# The two commands of the README. Each sets up what it needs on first use:
# a virtual environment in .venv, the requirements, and the package itself.
PY ?= $(shell command -v python3.11 || command -v python3)
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Chapters (make book) and test workers (make test) run this many at once, each on one torch thread:
# two threads per process on a shared pair of cores ran small ops four times slower.
JOBS ?= $(shell nproc)

.PHONY: book test compat browser clean

$(STAMP): requirements.txt pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $@

## make book: execute every notebook and build the HTML book
# The chapters run first, as many at once as there are cores (JOBS=1: one at a time), into the jupyter-cache
# Jupyter Book reads; the report lists each chapter's execution time. The log is kept in _build/book.log.
book: $(STAMP)
	@mkdir -p _build
	set -o pipefail; { OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/python -m tests.notebooks --cache _build/.jupyter_cache --jobs $(JOBS) && \
	  $(BIN)/jupyter-book build . --warningiserror; } 2>&1 | tee _build/book.log
	@echo "The book is at $(CURDIR)/_build/html/index.html"

## make test: lint, unit tests and doctests, and every notebook of _toc.yml at CI scale, JOBS at once
## (worksteal: an idle worker takes tests from a busy one, so a slow chapter does not hold the others back)
test: $(STAMP) browser
	$(BIN)/ruff check .
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/python -m pytest -n $(JOBS) --dist worksteal

## make compat: the Colab path. A second environment from pyproject.toml alone, with every
## declared dependency at its floor (">=X" installed as "==X"), runs the package tests and
## chapters 01, 02 and 07 at ci scale. Not in CI: the floor torch is a CUDA wheel of about 3 GB.
COMPAT := .venv-compat
FLOORS := import re, tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
	deps = p["dependencies"] + [d for ds in p["optional-dependencies"].values() for d in ds]; \
	print("\n".join(d.replace(">=", "==") for d in deps if ">=" in d))
compat:
	rm -rf $(COMPAT) && $(PY) -m venv $(COMPAT)
	$(COMPAT)/bin/pip install -q --upgrade pip
	$(COMPAT)/bin/python -c '$(FLOORS)' > $(COMPAT)/floors.txt
	$(COMPAT)/bin/pip install -q -c $(COMPAT)/floors.txt -e ".[book]" pytest pyyaml nbclient ipykernel==6.31.0
	$(COMPAT)/bin/python -c 'import torch, conslaw_lite; print("compat: torch", torch.__version__, "conslaw_lite", conslaw_lite.__version__)'
	CI=true $(COMPAT)/bin/python -m pytest -q --ignore=tests/test_book.py --ignore=tests/test_notebooks.py
	CI=true $(COMPAT)/bin/python -m pytest -q tests/test_notebooks.py -k "01_toy or 02_counting or 07_discrete"

## make browser: Debian's headless chromium and chromium-driver, for the interactive figures' browser test
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	{ $(if $(filter 0,$(shell id -u)),,sudo) apt-get update -q && \
	  $(if $(filter 0,$(shell id -u)),,sudo) apt-get install -y -q chromium chromium-driver; } || \
	echo "make browser: could not install chromium; tests/test_drift_figure_browser.py will be skipped"

clean:
	rm -rf _build
