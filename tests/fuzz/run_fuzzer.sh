#!/usr/bin/env bash
# Runs one fuzz harness for a bounded time over its seed corpus:
#   run_fuzzer.sh FUZZER SEED_DIR SECONDS
# FUZZER is either a libFuzzer binary (--config=fuzz) or the same harness
# linked with standalone_main.cc (default build); both read this command
# line. New inputs libFuzzer finds go to a scratch directory, never into the
# checked-in seeds; a crashing input is kept in the test's undeclared
# outputs (bazel-testlogs/.../test.outputs/) for reproduction.
set -euo pipefail
fuzzer=$1 seeds=$2 seconds=$3
scratch="${TEST_TMPDIR:-$(mktemp -d)}/corpus"
artifacts="${TEST_UNDECLARED_OUTPUTS_DIR:-${TEST_TMPDIR:-/tmp}}/"
mkdir -p "$scratch" "$artifacts"
# -rss_limit_mb and -malloc_limit_mb make an allocation sized from an
# untrusted length field a failure instead of a slow swap. -timeout flags an
# input that hangs a parser.
exec "$fuzzer" -max_total_time="$seconds" -timeout=10 \
  -rss_limit_mb=2048 -malloc_limit_mb=1024 -print_final_stats=1 \
  -artifact_prefix="$artifacts" "$scratch" "$seeds"
