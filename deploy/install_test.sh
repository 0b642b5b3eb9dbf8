#!/usr/bin/env bash
# deploy/install.sh into a staging root: every binary the systemd units start
# is there and runs (--help), every directory they name exists, the example
# jobs find their ONNX models, and a bad flag is refused. (On a real root the
# units were also checked with `systemd-analyze verify`; see DEPLOYMENT.md.)
set -euo pipefail

runfiles="${RUNFILES_DIR:-$0.runfiles}/psrt"
root="$TEST_TMPDIR/root"
fail() { echo "FAIL: $*" >&2; exit 1; }

"$runfiles/deploy/install.sh" --bin_dir="$runfiles" --destdir="$root" --systemd >"$TEST_TMPDIR/out.txt" 2>&1 ||
  { cat "$TEST_TMPDIR/out.txt"; fail "install.sh failed"; }
# Twice: idempotent.
"$runfiles/deploy/install.sh" --bin_dir="$runfiles" --destdir="$root" --systemd >/dev/null 2>&1 ||
  fail "a second install.sh failed"

units=("$root"/etc/systemd/system/psrt-*.service)
[ "${#units[@]}" -eq 3 ] || fail "expected 3 units, found ${units[*]}"
for unit in "${units[@]}"; do
  # The command line, continuation lines joined.
  exec_line="$(sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$unit" | grep '^ExecStart=')"
  binary="$(echo "$exec_line" | sed 's/^ExecStart=//' | awk '{print $1}')"
  [ -x "$root$binary" ] || fail "$(basename "$unit") starts $binary, which install.sh did not install"
  "$root$binary" --help >"$TEST_TMPDIR/help.txt" 2>&1 || fail "$binary --help failed"
  grep -q -- "--cluster_spec" "$TEST_TMPDIR/help.txt" || fail "$binary --help does not list --cluster_spec"
  # Every /etc and /var path a flag names lives in a directory install.sh
  # made (a file the operator puts there, or a directory the daemon makes).
  for path in $(echo "$exec_line" | grep -o '=/\(etc\|var\)/[^ ]*' | sed 's/^=//'); do
    [ -d "$root$(dirname "$path")" ] || fail "$(basename "$unit") names $path, but $(dirname "$path") was not made"
  done
  grep -q '^User=psrt$' "$unit" || fail "$(basename "$unit") does not run as psrt"
done
for tool in checkpoints export evaluator psrt-make-certs; do
  [ -x "$root/opt/psrt/bin/$tool" ] || fail "$tool not installed"
done

# The installed example jobs name ONNX models that were installed with them.
for job in "$root"/opt/psrt/share/examples/*.pbtxt; do
  for model in $(grep -o 'path: "[^"]*\.onnx"' "$job" | sed 's/path: "\(.*\)"/\1/'); do
    [ -f "$(dirname "$job")/$model" ] || fail "$(basename "$job") names $model, not installed"
  done
done

if "$runfiles/deploy/install.sh" --bogus >"$TEST_TMPDIR/bad.txt" 2>&1; then fail "--bogus was accepted"; fi
grep -q "unknown argument '--bogus'" "$TEST_TMPDIR/bad.txt" || fail "--bogus refused without naming it"
echo "PASS"
