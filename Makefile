# kafkalog: `make run` and `make test` work on a fresh machine with Python 3.10 to 3.13 (`python3` unless PYTHON=), gcc and
# Java 17.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed
DATA   ?= ./data
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: run test test-fast test-interpreter test-pythons dist fuzz crash soak stress sanitize bench bench-quick clean setup jvm interop \
	client-suites

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel

# (Re)install when packaging or native sources change; an editable install builds the core in place.
$(STAMP): $(PY) pyproject.toml setup.py $(wildcard engine/_native/*.pyx engine/_native/*.pxd engine/_native/*.c engine/_native/*.h)
	$(PIP) install -q -e '.[test,spark,bench]'
	$(PY) -c "import engine, sys; print('kafkalog core:', engine.IMPL)"
	touch $(STAMP)

setup: $(STAMP) jvm

# kafkalog's Spark source on the JVM (engine/spark/jvm): compiled with javac against the installed pyspark's jars when
# missing or stale, in a few seconds; without javac it says so and Spark uses the Python source
jvm: $(STAMP)
	@$(PY) -m engine.spark.jvm

# the Spark tests run on the JVM source (required, when javac is here) and again on the Python source
SPARK_SOURCE := $(if $(shell command -v javac),jvm,auto)

# the suite runs in TEST_WORKERS processes (pytest-xdist; a test file stays in one worker; 0: in pytest's own process),
# its temporary folders under TEST_TMP: by default in /dev/shm when that is a tmpfs with 8 GiB free (the suite does not
# wait for the disk on its many fsyncs), else pytest's default on disk
TEST_WORKERS ?= 2
TEST_TMP ?= $(shell [ -w /dev/shm ] && [ "$$(stat -f -c %T /dev/shm)" = tmpfs ] && \
	[ "$$(df -Pk /dev/shm | awk 'NR==2 {print $$4}')" -gt 8388608 ] && \
	echo /dev/shm/kafkalog-tests-$$(printf %s "$(CURDIR)/$(VENV)" | cksum | cut -d' ' -f1))
PYTEST := $(PY) -m pytest -q -p no:randomly $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile) \
	$(if $(TEST_TMP),--basetemp=$(TEST_TMP))

run: setup
	$(PY) -m engine demo --data $(DATA)

# the pure-Python twins' pass: the suites that run the codec, the log and the clients without the native core
PURE_PYTHON_SUITES := tests/unit/test_codec_vectors.py tests/unit/test_import_selection.py tests/interop \
	tests/unit/test_partitioner.py tests/unit/test_clients.py tests/unit/test_idempotence.py tests/unit/test_engine.py \
	tests/unit/test_transactions.py tests/unit/test_leader_append.py tests/unit/test_segment_appender.py \
	tests/unit/test_producer_fast_path.py tests/unit/test_log_read.py tests/unit/test_residency.py tests/unit/test_topic_configs.py \
	tests/unit/test_replication.py tests/unit/test_aio.py tests/network/test_kafka_semantics.py

test: setup
	KAFKALOG_SPARK_SOURCE=$(SPARK_SOURCE) $(PYTEST) --ignore=tests/broker tests
	KAFKALOG_SPARK_SOURCE=python $(PYTEST) tests/spark/test_spark_source.py tests/spark/test_spark_stream.py \
		tests/spark/test_spark_paths.py tests/spark/test_spark_sink.py
	KAFKALOG_NO_EXTENSIONS=1 KAFKALOG_REQUIRE_EXTENSIONS=0 $(PYTEST) -m "not spark" $(PURE_PYTHON_SUITES) tests/stress

# the suites whose behaviour depends on the interpreter, native core and pure-Python twins: unit, interop, fuzz and
# the simulation. Left to `make test`: the JVM's (Spark), process kills (crash), the long stress runs, the mirror
# to a cluster and the listener's real clients, whose Python side is the code these suites run
# (kio, the codec judge of the APIs kafka-python lacks, needs Python 3.11+: its tests run everywhere else)
NOT_KIO = $(shell $(PY) -c 'import sys; print("" if sys.version_info >= (3, 11) else " and not kio")')
test-interpreter: setup
	$(PYTEST) -m "not spark$(NOT_KIO)" --ignore=tests/broker --ignore=tests/spark --ignore=tests/crash --ignore=tests/stress \
		--ignore=tests/mirror --ignore=tests/network/test_listener.py --ignore=tests/network/test_quix_streams.py \
		--ignore=tests/network/test_frameworks.py tests
	KAFKALOG_NO_EXTENSIONS=1 KAFKALOG_REQUIRE_EXTENSIONS=0 $(PYTEST) -m "not spark" $(PURE_PYTHON_SUITES)

# `make test-interpreter` on each Python from 3.10 to 3.13 that is installed (pyenv's first, then pythonX.Y on PATH),
# each in its own .venv-X.Y; a version that is not installed is named and skipped, and at least one must run
PYTHONS ?= 3.10 3.11 3.12 3.13
test-pythons:
	@set -e; ran=""; for v in $(PYTHONS); do \
	  py=$$(ls -d $$(pyenv root 2>/dev/null)/versions/$$v*/bin/python$$v 2>/dev/null | tail -1); \
	  [ -n "$$py" ] || py=$$(command -v python$$v || true); \
	  if [ -z "$$py" ] || ! $$py -c pass 2>/dev/null; then echo "test-pythons: Python $$v is not installed: skipped"; continue; fi; \
	  echo "test-pythons: Python $$v ($$py)"; $(MAKE) --no-print-directory test-interpreter PYTHON=$$py VENV=.venv-$$v; ran="$$ran $$v"; \
	done; [ -n "$$ran" ] || { echo "test-pythons: none of $(PYTHONS) is installed" >&2; exit 1; }; \
	echo "test-pythons: make test-interpreter passed on Python$$ran"

# an sdist and a wheel (the native core required) in dist/, then tests/dist_smoke.py: the wheel owns only `engine`,
# installs beside the package index's `segments` and `replication` in a fresh venv outside the tree, works there
# (open, produce, consume, the CLI, a Spark read), and uninstalls leaving both intact
dist: setup
	rm -rf dist
	KAFKALOG_REQUIRE_EXTENSIONS=1 $(PY) -m build --outdir dist .
	$(PY) -m tests.dist_smoke dist

test-fast: setup
	$(PY) -m pytest -q -x -m "not spark" --ignore=tests/broker tests

# 10x CI's fuzzing: decoder (the JVM source's too), parser and protocol inputs (mutation and coverage-guided), seeded operation runs, power cuts,
# random group membership changes and compaction against its model
fuzz: $(STAMP) jvm
	@$(PY) -c "import importlib.util as u, sys; u.find_spec('atheris') or print('make fuzz: atheris has no build for Python %d.%d: tests/fuzz runs seeded mutation fuzzing (tests/fuzz/coverage.py mutation_fuzz) instead of coverage-guided fuzzing' % sys.version_info[:2])"
	KAFKALOG_FUZZ_CASES=8000000 KAFKALOG_PARSER_FUZZ_CASES=2000000 KAFKALOG_SIM_RUNS=2000 KAFKALOG_POWER_CUTS=5000 \
	KAFKALOG_COVERAGE_FUZZ_RUNS=2000000 KAFKALOG_PROTOCOL_FUZZ_CASES=200000 KAFKALOG_CHECKPOINT_TWIN_CASES=1000000 \
		$(PY) -m pytest -q tests/unit/test_codec_fuzz.py tests/unit/test_parser_fuzz.py tests/sim tests/fuzz \
		tests/network/test_protocol_fuzz.py tests/unit/test_offset_checkpoint_twins.py
	KAFKALOG_JVM_FUZZ_CASES=1000000 KAFKALOG_SPARK_SOURCE=$(SPARK_SOURCE) $(PY) -m pytest -q tests/spark/test_jvm_decoder.py
	KAFKALOG_GROUP_MODEL_RUNS=100 $(PY) -m pytest -q tests/unit/test_groups.py -k "random_joins or random_histories"
	KAFKALOG_COMPACTION_MODEL_RUNS=100 $(PY) -m pytest -q tests/unit/test_compaction.py -k latest_value

crash: $(STAMP)
	KAFKALOG_CRASH_TRIALS=500 KAFKALOG_POWER_LOSS_TRIALS=1000 KAFKALOG_REPLICATED_KILLS=60 KAFKALOG_TXN_KILLS=500 \
	KAFKALOG_CLEANER_KILLS=250 KAFKALOG_STAGED_KILLS=100 KAFKALOG_AIO_KILLS=200 $(PY) -m pytest -q tests/crash

# the bounded-resources checks at full size: memory while consuming a 10 GiB log (CI: 1 GiB), and a directory of
# 100,000 partitions under ulimit -n 1024 (make test: 10,000)
soak: $(STAMP)
	KAFKALOG_BIG_LOG_BYTES=10737418240 $(PY) -m pytest -q tests/unit/test_bounded_resources.py
	KAFKALOG_SCALE_PARTITIONS=100000 $(PY) -m pytest -q tests/unit/test_many_partitions.py -k ulimit

# the concurrency stress harness and the closed-map scenario (tests/stress), each for STRESS_SECONDS on each twin
# (make test: a few seconds each)
STRESS_SECONDS ?= 600
stress: $(STAMP)
	KAFKALOG_STRESS_SECONDS=$(STRESS_SECONDS) $(PY) -m pytest -q -p no:randomly tests/stress
	KAFKALOG_NO_EXTENSIONS=1 KAFKALOG_REQUIRE_EXTENSIONS=0 KAFKALOG_STRESS_SECONDS=$(STRESS_SECONDS) \
		$(PY) -m pytest -q -p no:randomly tests/stress

# the Cython core built with AddressSanitizer and UndefinedBehaviorSanitizer (in build/sanitize), then the codec
# tests, the stress harness and a slice of the fuzzers under it; any report fails it (CI: SANITIZE_SCALE=1)
SANITIZE_SCALE ?= 10
sanitize: $(STAMP)
	SANITIZE_SCALE=$(SANITIZE_SCALE) bash tests/sanitize.sh

# against a real Kafka broker (KAFKA_HOME: a Kafka installation, or a broker build folder): one KRaft node on
# 127.0.0.1 with a fresh data directory; mirroring INTEROP_RECORDS records each way with INTEROP_KILLS kill -9s,
# handing a directory to the broker and the broker's directory back to kafkalog (tests/broker)
INTEROP_RECORDS ?= 1000000
INTEROP_KILLS ?= 5
# the clients' own integration suites against a fresh listener, each built or downloaded once into
# .cache/client-suites: librdkafka's (from the npm package that ships its source; on the native core and again on the
# pure-Python twin; then once more with its consumers on the consumer group protocol; then its share consumer tests)
# and kafka-python's (from the
# source distribution of the installed release). Each fails when a test it expects to pass does not, or an unlisted
# one passes
# librdkafka's share consumer tests run for minutes each: CI runs the quicker ones, SHARE_TESTS=all runs every one
SHARE_TESTS ?= 0171,0172,0173,0175,0177,0178,0179,0180,0181,0185
client-suites: setup
	$(PY) -m tests.client_suites.librdkafka
	KAFKALOG_NO_EXTENSIONS=1 KAFKALOG_REQUIRE_EXTENSIONS=0 $(PY) -m tests.client_suites.librdkafka
	$(PY) -m tests.client_suites.librdkafka --group-protocol consumer
	$(PY) -m tests.client_suites.librdkafka --share $(if $(filter all,$(SHARE_TESTS)),,--tests $(SHARE_TESTS))
	$(PY) -m tests.client_suites.kafka_python

interop: setup
	@[ -n "$(KAFKA_HOME)" ] || { echo "make interop: set KAFKA_HOME to a Kafka installation or a broker build folder" >&2; exit 2; }
	KAFKA_HOME=$(KAFKA_HOME) KAFKALOG_INTEROP_RECORDS=$(INTEROP_RECORDS) KAFKALOG_INTEROP_KILLS=$(INTEROP_KILLS) \
		$(PY) -m pytest -q -p no:randomly tests/broker

bench: setup
	$(PY) -m bench
	$(PY) -m bench.readme_tables
	$(PY) -m pytest bench --benchmark-only -q

# CI's smoke run: small data, few repetitions; it asserts no timing and fails only if a benchmark cannot run
# or a suite leaves an engine's threads running
bench-quick: setup
	$(PY) -m bench --quick --out build/bench-quick
	KAFKALOG_BENCH_PARTITIONS=200 \
	$(PY) -m pytest bench --benchmark-only -q --benchmark-min-rounds=1 --benchmark-max-time=0.01 \
		--benchmark-warmup=off --benchmark-disable-gc

clean:
	rm -rf build dist *.egg-info .hypothesis .benchmarks spark-warehouse $(DATA) .venv-3.* engine/spark/jvm/kafkalog-spark.jar \
		$(TEST_TMP)
	find engine -name '*.so' -delete
	find engine/_native -name '_*.c' -delete
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
