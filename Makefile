# lakestream: two set-up commands for a fresh machine.
#   make demo   run the demo on embedded defaults (a file:// warehouse here, no server needed)
#   make test   create .venv, install the project with its test extra, lint, run every test
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

# Spark (later issues) needs these; harmless for everything else.
export PYSPARK_PYTHON := $(abspath $(BIN)/python)
export SPARK_LOCAL_IP := 127.0.0.1

.PHONY: test test-fast test-thorough test-stack demo s3 stack stack-down stack-status bench lint install clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@# headless Chromium for the quality report's browser test (Debian's chromium; never fails the build)
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
		&& (apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium) >/dev/null 2>&1 \
		|| echo "chromium not installed: the report's browser test will be skipped"; }
	@# Spark's classes dumped once as a class-data-sharing archive the suite's drivers map (tests/support/spark_cds.py)
	@$(BIN)/python -m tests.support.spark_cds || echo "no Spark class archive: the tests run without it"
	@touch $@

# ruff, then mypy over the packages ([tool.mypy] in pyproject.toml: annotated but lakehouse.log, object_store strict).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m mypy

# Two workers: much of the suite waits on subprocesses, servers and JVMs, so two halves overlap on two cores.
# TEST_WORKERS=0 runs it in one process. `make test` is the gate CI runs: lint, the whole suite, then the native
# stack end to end (test-stack); --durations names the 30 slowest tests of each run.
TEST_WORKERS ?= 2
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

test: lint
	$(BIN)/python -m pytest --durations=30 $(XDIST) $(PYTEST_ARGS)
	$(MAKE) --no-print-directory test-stack

# The fast tier: every test that needs no JVM, no S3 server and no subprocess (tests/support/tiers.py), with the
# `dev` hypothesis profile; a test of it that starts a process fails and says how to mark it.
test-fast: $(STAMP)
	LAKESTREAM_TEST_TIER=fast HYPOTHESIS_PROFILE=dev $(BIN)/python -m pytest -m fast -q $(PYTEST_ARGS)

# Every property test with five times its example count (tests/support/profiles.py): a night's run.
test-thorough: $(STAMP)
	HYPOTHESIS_PROFILE=thorough $(BIN)/python -m pytest $(XDIST) $(PYTEST_ARGS) \
		$$(grep -rl --include='test_*.py' '@given' tests)

# The native stack end to end (about 4 minutes): up, the DAGs under the real scheduler, a lost worker, down.
test-stack: $(STAMP)
	LAKESTREAM_TEST_STACK=1 $(BIN)/python -m pytest --durations=10 -m stack tests/stack/test_stack_e2e.py

demo: $(STAMP)
	$(BIN)/lakestream demo $(DEMO_ARGS)

# A SeaweedFS S3 server on loopback for manual use; prints endpoint and credentials. Ctrl+C stops it.
s3: $(STAMP)
	$(BIN)/python -m object_store.seaweedfs $(S3_DIR)

# The native stack (no Docker) under .stack/: SeaweedFS, a Spark master and worker, Airflow; see docs/guides/deploy.md.
stack: $(STAMP)
	$(BIN)/python -m stack up $(STACK_ARGS)

stack-down: $(STAMP)
	$(BIN)/python -m stack down $(STACK_ARGS)

stack-status: $(STAMP)
	$(BIN)/python -m stack status $(STACK_ARGS)

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	$(BIN)/python bench/object_store.py $(BENCH_ARGS)
	$(BIN)/python bench/log.py $(BENCH_ARGS)
	$(BIN)/python bench/log_cost.py $(BENCH_ARGS)
	$(BIN)/python bench/catalog.py $(BENCH_ARGS)
	$(BIN)/python bench/tiering.py $(BENCH_ARGS)
	$(BIN)/python bench/maintenance.py $(BENCH_ARGS)
	$(BIN)/python bench/merge_on_read.py $(BENCH_ARGS)
	$(BIN)/python bench/merge_engines.py $(BENCH_ARGS)
	$(BIN)/python bench/metadata.py --only local $(BENCH_ARGS)
	$(BIN)/python bench/changes.py $(BENCH_ARGS)
	$(BIN)/python bench/evolution.py $(BENCH_ARGS)
	$(BIN)/python bench/spark_read.py $(BENCH_ARGS)
	$(BIN)/python bench/streams.py $(BENCH_ARGS)
	$(BIN)/python bench/layers.py $(BENCH_ARGS)
	$(BIN)/python bench/layers_sql.py $(BENCH_ARGS)
	$(BIN)/python bench/quality.py $(BENCH_ARGS)
	$(BIN)/python bench/metrics.py $(BENCH_ARGS)
	$(BIN)/python bench/executors.py $(BENCH_ARGS)
	$(BIN)/python bench/stack.py

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info lakestream-demo
