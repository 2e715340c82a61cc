# `make run` and `make test` set everything up from nothing (a .venv, installed once).
# `make run` installs the package and what the polars engine needs, nothing more; `make test`
# adds the dev tools, Spark, Delta and S3 (it upgrades a venv `make run` made, and `make run`
# then uses it as it is). Installing builds the compiled kernels (gcc; docs/operations-image.md).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
SUM    := $(shell cat pyproject.toml setup.py | cksum | cut -d' ' -f1)
RUN_STAMP  := $(VENV)/.installed-run-$(SUM)
TEST_STAMP := $(VENV)/.installed-test-$(SUM)
KERNELS    := $(VENV)/.kernels
PYX        := $(wildcard pipeline/*/*.pyx)
KERNEL_SOURCES := $(PYX) $(wildcard pipeline/kernels/*.pxi pipeline/kernels/*.h)
BYTECODE   := $(VENV)/.bytecode
SPARK_CLASSES := $(VENV)/spark-classes.jsa
PY_SOURCES := $(shell find pipeline -name '*.py')

.PHONY: run test test-fast lint docs bench clean clean-cache setup setup-run

setup: $(TEST_STAMP) $(KERNELS) $(BYTECODE) $(SPARK_CLASSES)

setup-run: $(RUN_STAMP) $(KERNELS) $(BYTECODE)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# the package and the polars engine's dependencies; pip builds the kernels
$(RUN_STAMP): pyproject.toml setup.py | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	rm -f $(VENV)/.installed-run-*
	touch $@ $(KERNELS)

# all of make run's, and the extras the tests need
$(TEST_STAMP): pyproject.toml setup.py | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev,spark,delta,s3]'
	rm -f $(VENV)/.installed-*
	touch $@ $(RUN_STAMP) $(KERNELS)

# the kernels again when their sources changed since the install (a pull, an edit)
$(KERNELS): $(KERNEL_SOURCES) | $(BIN)/python
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

# the package's bytecode, written once here: an editable install leaves it to the first import,
# which writes nothing under PYTHONDONTWRITEBYTECODE (common in images and CI), so every run
# would compile the package's modules again (about 0.1 s of a short run)
$(BYTECODE): $(PY_SOURCES) | $(BIN)/python
	$(BIN)/python -m compileall -q pipeline
	touch $@

# the classes a Spark run loads, archived once per install for the tests' JVMs to start from
# (tests/spark_class_archive.py: much of a short Spark run's CPU is its JVM's start)
$(SPARK_CLASSES): $(TEST_STAMP) | $(KERNELS) $(BYTECODE)
	$(BIN)/python tests/spark_class_archive.py $@

run: setup-run
	$(BIN)/snim-batch run --config config.yaml --overwrite

# two workers (pytest-xdist), each test file on one of them (docs/ARCHITECTURE.md, Tests)
test: setup
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

# the quick loop: no slow tests, no Spark (make test runs everything), so no Spark class archive
test-fast: $(TEST_STAMP) $(KERNELS) $(BYTECODE)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m 'not slow and not spark'

lint: setup
	$(BIN)/ruff check pipeline tests scripts

# docs/cli.md from every command's --help (tests/test_docs.py fails while it is stale)
docs: setup-run
	$(BIN)/python scripts/cli_reference.py

clean: clean-cache
	rm -rf $(VENV) out .pytest_cache

# the built kernels (Cython's C files, the extension modules, setuptools' build tree): the
# next make run or make test builds them again
clean-cache:
	rm -rf build
	rm -f $(PYX:.pyx=.c) $(PYX:.pyx=.html) $(KERNELS)
	find pipeline -name '*.so' -delete

# Benchmarks (benchmarks/README.md): ratios against references, written to
# benchmarks/results/RESULTS.md; bench-large runs the 200M-heap job (long) and appends to it;
# bench-spark runs only the Spark rows (results/SPARK.md); bench-memory issue 37's memory rows.
.PHONY: bench-large bench-spark bench-memory

bench: setup
	$(BIN)/python benchmarks/bench.py

bench-spark: setup
	$(BIN)/python benchmarks/bench.py --spark

bench-large: setup
	$(BIN)/python benchmarks/bench.py --large

bench-memory: setup
	$(BIN)/python benchmarks/bench.py --memory
