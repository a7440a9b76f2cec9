# Two entry points: `make demo` and `make test`. Both build .venv from nothing.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
UV     := $(VENV)/bin/uv
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: demo test lint typecheck unit bench clean

$(UV):
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check uv==0.13.8

$(STAMP): $(UV) pyproject.toml
	$(UV) pip install --quiet --python $(PY) -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/broker demo

lint: $(STAMP)
	$(VENV)/bin/ruff check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy broker

test: lint typecheck
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) bench/inmem.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
