# `make run` and `make test` set everything up from nothing (a .venv, installed once).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: run test test-fast lint bench clean clean-cache setup

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,spark,delta,s3]'
	rm -f $(VENV)/.installed-*
	touch $@

run: $(STAMP)
	$(BIN)/snim-batch run --config config.yaml --overwrite

# two workers (pytest-xdist), each test file on one of them (docs/ARCHITECTURE.md, Tests)
test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

# the quick loop: no slow tests, no Spark (make test runs everything)
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m 'not slow and not spark'

lint: $(STAMP)
	$(BIN)/ruff check pipeline tests

clean: clean-cache
	rm -rf $(VENV) out .pytest_cache

# numba's compiled kernels (docs/ARCHITECTURE.md, "Kernels and numba's cache")
clean-cache:
	find pipeline -name '*.nbi' -delete -o -name '*.nbc' -delete

# Benchmarks (benchmarks/README.md): ratios against references, written to
# benchmarks/results/RESULTS.md; bench-large runs the 200M-heap job (long) and appends to it;
# bench-spark runs only the Spark rows (results/SPARK.md).
.PHONY: bench-large bench-spark

bench: $(STAMP)
	$(BIN)/python benchmarks/bench.py

bench-spark: $(STAMP)
	$(BIN)/python benchmarks/bench.py --spark

bench-large: $(STAMP)
	$(BIN)/python benchmarks/bench.py --large
