#!/usr/bin/env bash
# Installs psrt's daemons and tools where deploy/systemd/ and deploy/Dockerfile
# expect them, and the user and directories they run with:
#
#   PREFIX/bin/{ps_server,worker,chief,evaluator,checkpoints,export}
#   PREFIX/bin/psrt-make-certs              deploy/make_certs.sh
#   PREFIX/share/{specs,examples,systemd}   the example specs, jobs (and their
#                                           ONNX models) and units
#   /etc/psrt, /etc/psrt/tls                configuration (root:psrt, 0750)
#   /var/lib/psrt                           snapshots and checkpoints (psrt, 0750)
#   user and group psrt                     a system user with no login shell
#
#   deploy/install.sh                      # builds (bazel -c opt), then installs
#   deploy/install.sh --systemd            # also the units, and daemon-reload
#   deploy/install.sh --bin_dir=bazel-bin --destdir=/tmp/root --no_user
#                                          # prebuilt binaries into a staging root
#
# Idempotent: a second run replaces the binaries and keeps /etc/psrt's files,
# the data under /var/lib/psrt and the user.
set -euo pipefail

usage() {
  sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
  cat <<'EOF'
Flags:
  --prefix=DIR    where bin/ and share/ go (default /opt/psrt; the units name
                  /opt/psrt/bin, so another prefix needs drop-ins)
  --destdir=DIR   a staging root every path is put under (packaging, images,
                  tests); nothing outside it is touched
  --bin_dir=DIR   prebuilt binaries in bazel's layout (DIR/ps/server, ...):
                  skips the build
  --no_user       do not create the psrt user, nor chown (implied by --destdir)
  --systemd       install the units into /etc/systemd/system (and reload)
  --help          this text
EOF
}

prefix=/opt/psrt
destdir=""
bin_dir=""
make_user=1
systemd=0
for arg in "$@"; do
  case "$arg" in
    --prefix=*) prefix="${arg#*=}" ;;
    --destdir=*) destdir="${arg#*=}"; make_user=0 ;;
    --bin_dir=*) bin_dir="${arg#*=}" ;;
    --no_user) make_user=0 ;;
    --systemd) systemd=1 ;;
    --help | -h) usage; exit 0 ;;
    *) echo "install: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done
case "$prefix" in
  /*) ;;
  *) echo "install: --prefix must be an absolute path, not '$prefix'" >&2; exit 2 ;;
esac

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# bazel target -> installed name
targets=(
  "ps/server:ps_server"
  "worker/main:worker"
  "chief/main:chief"
  "worker/evaluator:evaluator"
  "chief/checkpoints:checkpoints"
  "chief/export:export"
)

if [ -z "$bin_dir" ]; then
  labels=()
  for t in "${targets[@]}"; do
    path="${t%%:*}"
    labels+=("//${path%/*}:${path##*/}")
  done
  echo "install: building ${labels[*]}"
  (cd "$repo" && bazel build -c opt "${labels[@]}")
  bin_dir="$repo/bazel-bin"
fi
for t in "${targets[@]}"; do
  src="$bin_dir/${t%%:*}"
  if [ ! -x "$src" ]; then
    echo "install: $src is missing or not executable (build it, or fix --bin_dir)" >&2
    exit 1
  fi
done

root="${destdir%/}"
install -d -m 0755 "$root$prefix/bin" "$root$prefix/share/specs" "$root$prefix/share/examples" \
  "$root$prefix/share/systemd"
for t in "${targets[@]}"; do
  install -m 0755 "$bin_dir/${t%%:*}" "$root$prefix/bin/${t##*:}"
done
install -m 0644 "$repo"/deploy/specs/*.json "$root$prefix/share/specs/"
# The example jobs with the ONNX models they name (paths relative to the job).
install -d -m 0755 "$root$prefix/share/examples/onnx"
install -m 0644 "$repo"/examples/*.pbtxt "$root$prefix/share/examples/"
install -m 0644 "$repo"/examples/onnx/*.onnx "$root$prefix/share/examples/onnx/"
install -m 0644 "$repo"/deploy/systemd/*.service "$root$prefix/share/systemd/"
install -m 0755 "$repo/deploy/make_certs.sh" "$root$prefix/bin/psrt-make-certs"

if [ "$make_user" -eq 1 ]; then
  if ! getent group psrt >/dev/null; then groupadd --system psrt; fi
  if ! getent passwd psrt >/dev/null; then
    useradd --system --gid psrt --home-dir /var/lib/psrt --no-create-home --shell /usr/sbin/nologin \
      --comment "psrt daemons" psrt
    echo "install: made the system user psrt"
  fi
fi
install -d -m 0750 "$root/etc/psrt" "$root/etc/psrt/tls" "$root/var/lib/psrt"
if [ "$make_user" -eq 1 ]; then
  chown root:psrt "$root/etc/psrt" "$root/etc/psrt/tls"
  chown psrt:psrt "$root/var/lib/psrt"
fi

if [ "$systemd" -eq 1 ]; then
  install -d -m 0755 "$root/etc/systemd/system"
  install -m 0644 "$repo"/deploy/systemd/*.service "$root/etc/systemd/system/"
  if [ -z "$destdir" ] && command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
    systemctl daemon-reload
  fi
fi

echo "install: psrt in $root$prefix/bin ($(ls "$root$prefix/bin" | tr '\n' ' '))"
if [ -z "$destdir" ] && [ ! -f /etc/psrt/cluster.json ]; then
  echo "install: next, /etc/psrt/cluster.json (examples in $prefix/share/specs), /etc/psrt/job.pbtxt and"
  echo "         the TLS files ($prefix/bin/psrt-make-certs); then systemctl enable --now psrt-ps@0 ..."
fi
