#!/usr/bin/env bash
# `make sanitize`: build the Cython core with AddressSanitizer and UndefinedBehaviorSanitizer in a copy of the tree
# (build/sanitize; the in-place build stays as it is), then run the codec tests, the stress harness and a slice of the
# fuzzers under it. Any report aborts the process, which fails the run. SANITIZE_SCALE scales the fuzzers' case counts
# and the stress seconds (CI: 1; make sanitize: 10).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="$(pwd)/.venv/bin/python"
SCALE="${SANITIZE_SCALE:-1}"
OUT=build/sanitize
rm -rf "$OUT" && mkdir -p "$OUT"
git ls-files -z engine segments replication txn tests setup.py pyproject.toml README.md | \
  xargs -0 cp --parents -t "$OUT"
cd "$OUT"
FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g"
CFLAGS="$FLAGS" LDFLAGS="-fsanitize=address,undefined" KAFKALOG_REQUIRE_EXTENSIONS=1 \
  "$PY" setup.py -q build_ext --inplace >/dev/null
export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:halt_on_error=1:allocator_may_return_null=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export PYTHONMALLOC=malloc  # every Python allocation through ASan's allocator, so its checks see them too
export KAFKALOG_REQUIRE_EXTENSIONS=1 KAFKALOG_STRESS_SECONDS=$((3 * SCALE))
export KAFKALOG_FUZZ_CASES=$((20000 * SCALE)) KAFKALOG_PARSER_FUZZ_CASES=$((5000 * SCALE))
"$PY" -c "import engine, engine._native._records as c; assert engine.IMPL == 'cython'; print('sanitized core:', c.__file__)"
"$PY" -m pytest -q -p no:randomly -p no:cacheprovider \
  tests/unit/test_codec_vectors.py tests/unit/test_codec_roundtrip.py tests/unit/test_codec_errors.py \
  tests/unit/test_scan_to_offset.py tests/unit/test_log_read.py tests/unit/test_segment_appender.py \
  tests/unit/test_leader_append.py tests/unit/test_producer_fast_path.py tests/unit/test_follower_append.py \
  tests/unit/test_lock.py tests/unit/test_compaction.py tests/unit/test_replica.py tests/unit/test_native_fetcher.py \
  tests/unit/test_close.py tests/unit/test_offset_checkpoint_twins.py \
  tests/unit/test_codec_fuzz.py tests/unit/test_parser_fuzz.py tests/interop tests/stress
# the leader's reading of every record of a client batch (_log_validator's C walk) on the batches Kafka refuses
"$PY" -m pytest -q -p no:randomly -p no:cacheprovider tests/network/test_kafka_semantics.py \
  -k "engine_append or bad_inputs"
