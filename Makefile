# One command each: `make demo` (set-up + the main job), `make test` (set-up + tests).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DB ?= demo.duckdb

.PHONY: setup demo test bench docs clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip > $(VENV)/setup.log 2>&1 || { cat $(VENV)/setup.log; exit 1; }

# torch is installed first and pinned (the CPU build), so nothing pulls a
# multi-GB CUDA build; GPU users install their own torch before `pip install -e .[collect]`.
$(VENV)/.installed: pyproject.toml setup.py pipeline/read/_scan.cpp pipeline/common/00-scaletrace-signals.pth | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0 >> $(VENV)/setup.log 2>&1 || echo "torch==2.13.0 not available; collectors need torch"
	@# Debian's simdjson for the compiled extractor (pipeline/read/_scan.cpp, built by pip below when present);
	@# without it ingest uses the Python extractor
	[ -f /usr/include/simdjson.h ] || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  { apt-get install -y -q libsimdjson-dev || { apt-get update -q && apt-get install -y -q libsimdjson-dev; }; } \
	  >/dev/null 2>&1; } || echo "no libsimdjson-dev: ingest will use the Python extractor"
	@# pip's and setuptools' output goes to .venv/setup.log, shown only when the install fails
	$(BIN)/pip install -q -e '.[dev,cluster,fast]' >> $(VENV)/setup.log 2>&1 || { cat $(VENV)/setup.log; exit 1; }
	@# an editable install places no data files: the start-up signal file (setup.py) is copied into site-packages
	$(BIN)/python -c "import shutil, sysconfig; shutil.copy('pipeline/common/00-scaletrace-signals.pth', sysconfig.get_paths()['purelib'])"
	@# Debian's chromium for the report's browser test (skipped with a reason where it cannot be installed)
	command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  { apt-get install -y -q chromium || { apt-get update -q && apt-get install -y -q chromium; }; } \
	  >/dev/null 2>&1; } || echo "no chromium: the browser test will skip"
	touch $@

setup: $(VENV)/.installed

demo: setup
	rm -f $(DB)
	$(BIN)/scaletrace sweep collectors/demo_sweep.toml --ingest $(DB)
	$(BIN)/scaletrace report --db $(DB) -o demo-report.html --png demo-figures
	@echo "report: $$(pwd)/demo-report.html  database: $(DB)  runs: runs/demo/"

# two workers (pytest-xdist, in the dev extra): 2 cores run the suite in about two thirds of the serial time;
# --dist loadgroup keeps the modules of tests/conftest.py's ONE_WORKER_MODULES on one worker each
test: setup
	$(BIN)/python -m pytest -n 2 --dist loadgroup

docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict
	@echo "docs: $$(pwd)/site/index.html"

bench: setup
	$(BIN)/python tests/bench/ingest.py
	$(BIN)/python tests/bench/ray_scaling.py

clean:
	rm -rf $(VENV) *.duckdb .pytest_cache
