#!/bin/bash
# scale_bench --quick as a smoke test: every curve runs end to end against
# real PS daemons and worker processes and prints its table. Nothing about
# speed is asserted (the figures belong to SCALE_BENCH_RESULTS.md).
set -u
out="${TEST_TMPDIR:-/tmp}/scale_bench_quick.txt"
if ! tests/bench/scale_bench --quick --out_dir="${TEST_TMPDIR:-/tmp}/scale_csv" >"$out" 2>"$out.err"; then
  echo "scale_bench --quick failed:"; cat "$out"; tail -n 40 "$out.err"; exit 1
fi
cat "$out"
for curve in null_step dense_step sparse memory hotkeys; do
  grep -q "^== $curve:" "$out" || { echo "no $curve curve"; exit 1; }
  [ -s "${TEST_TMPDIR:-/tmp}/scale_csv/$curve.csv" ] || { echo "no $curve.csv"; exit 1; }
done
if grep -q " failed" "$out"; then echo "a point failed"; exit 1; fi
grep -q "^scale_bench: done" "$out" || { echo "did not finish"; exit 1; }

# --netns --quick at one rate: between two network namespaces where this
# test may make them (root), else the benchmark says it skipped (exit 0).
netns_out="${TEST_TMPDIR:-/tmp}/scale_bench_netns.txt"
if ! tests/bench/scale_bench --netns --quick --rates=10gbit --curves=null,dense \
    --out_dir="${TEST_TMPDIR:-/tmp}/scale_csv" >"$netns_out" 2>"$netns_out.err"; then
  echo "scale_bench --netns --quick failed:"; cat "$netns_out"; tail -n 40 "$netns_out.err"; exit 1
fi
cat "$netns_out"
if ! grep -q "skipped, cannot make network namespaces" "$netns_out"; then
  for curve in null_step_netns_10gbit dense_step_netns_10gbit; do
    grep -q "^== $curve:" "$netns_out" || { echo "no $curve curve"; exit 1; }
    [ -s "${TEST_TMPDIR:-/tmp}/scale_csv/$curve.csv" ] || { echo "no $curve.csv"; exit 1; }
  done
  if grep -q " failed" "$netns_out"; then echo "a --netns point failed"; exit 1; fi
  grep -q "^scale_bench: done" "$netns_out" || { echo "--netns did not finish"; exit 1; }
fi
