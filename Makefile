# One command each: `make demo` (set-up + the main job), `make test` (set-up + tests).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DB ?= demo.duckdb

.PHONY: setup demo test bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch is installed first and pinned (the CPU build), so nothing pulls a
# multi-GB CUDA build; GPU users install their own torch before `pip install -e .[collect]`.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0 || echo "torch==2.13.0 not available; collectors need torch"
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

setup: $(VENV)/.installed

demo: setup
	rm -f $(DB)
	$(BIN)/scaletrace sweep collectors/demo_sweep.toml --ingest $(DB)
	$(BIN)/scaletrace query run_summary --db $(DB)
	$(BIN)/scaletrace query scaling --db $(DB)
	$(BIN)/scaletrace query layouts --db $(DB) -p world_size 4
	@echo "database: $(DB); runs: runs/demo/"

test: setup
	$(BIN)/python -m pytest

bench: setup
	$(BIN)/python tests/bench/ingest.py

clean:
	rm -rf $(VENV) *.duckdb .pytest_cache
