# The two commands of the README. Each sets up what it needs on first use:
# a virtual environment in .venv, the requirements, and the package itself.
PY ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: book test clean

$(STAMP): requirements.txt pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $@

## make book: execute every notebook and build the HTML book
book: $(STAMP)
	$(BIN)/jupyter-book build . --warningiserror
	@echo "The book is at $(CURDIR)/_build/html/index.html"

## make test: lint, unit tests and doctests, then every notebook of _toc.yml at CI scale
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

clean:
	rm -rf _build
