#!/usr/bin/env bash
# Installs every Debian package the project needs to build, test and run.
# Idempotent: a second run checks what is installed and returns in seconds.
# Runs `apt-get update` only when a package is missing and unknown to apt.
#
#   deploy/setup.sh               # build, test and run (tools, data, venvs)
#   deploy/setup.sh --build_only  # only what `bazel build` needs (an image's
#                                 # build stage: deploy/Dockerfile)
#   deploy/setup.sh --torch       # also PyTorch in /opt/psrt/venv-torch, for
#                                 # the comparisons against PyTorch
#                                 # (tests/bench/onnx_torch_bench.py,
#                                 # examples/onnx/make_models.py); about 3 GB
set -euo pipefail

build_only=0
torch=0
for arg in "$@"; do
  case "$arg" in
    --build_only) build_only=1 ;;
    --torch) torch=1 ;;
    *) echo "setup: unknown argument '$arg' (--build_only, --torch, or none)" >&2; exit 2 ;;
  esac
done

BUILD_PACKAGES=(
  bazel-bootstrap bazel-rules-java g++ git python3 zlib1g-dev
  # libraries wrapped in third_party/
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libeigen3-dev librocksdb-dev libgoogle-glog-dev libgflags-dev
  libgtest-dev libgmock-dev libbenchmark-dev libyaml-cpp-dev libcpp-httplib-dev
  libssl-dev libgloo-dev libleveldb-dev libre2-dev
  # HDF5 (serial): the .weights.h5 files //chief:export writes for Keras 3
  libhdf5-dev
  # PNG and JPEG images in TFRecord features (decode: ENCODED_IMAGE)
  libpng-dev libjpeg62-turbo-dev
)
TEST_PACKAGES=(
  python3-venv
  # fuzzing (bazel test --config=fuzz //tests/fuzz/...): clang and libFuzzer
  clang-14 libclang-rt-14-dev
  # tools the tests use (prometheus: promtool lints every /metrics page and
  # tests/metrics_test has a real Prometheus scrape a PS and a worker;
  # openssl: deploy/make_certs.sh; faketime: a chief whose clock is off,
  # tests/recovery_test and the chaos run, tests/harness/chaos_run.cc)
  prometheus openssl faketime
  # data
  dataset-fashion-mnist
)
PACKAGES=("${BUILD_PACKAGES[@]}")
if [ "$build_only" -eq 0 ]; then PACKAGES+=("${TEST_PACKAGES[@]}"); fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Update the package lists only when apt cannot find a missing package.
  need_update=0
  for p in "${missing[@]}"; do
    if ! apt-cache show "$p" >/dev/null 2>&1; then need_update=1; break; fi
  done
  if [ "$need_update" -eq 1 ] || [ -z "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v lock)" ]; then
    $SUDO apt-get update -qq
  fi
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all ${#PACKAGES[@]} Debian packages present"
fi

if [ "$build_only" -eq 1 ]; then
  echo "setup: done (build only)"
  exit 0
fi

if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && \
   [ -z "$(ls /usr/share/datasets/fashion-mnist/ 2>/dev/null)" ]; then
  echo "setup: Fashion-MNIST missing under /usr/share/datasets/fashion-mnist/" >&2
  exit 1
fi
# Python tools for tests only (never in the product's data path): PyPI's
# tensorboard (TFRecord framing, event files) and tfrecord (TensorFlow's
# Example protos and a writer) check our readers and writers with code
# we did not write.
# make_venv DIR PACKAGE...: a virtual environment with exactly these pins,
# remade only when the list changes (a stamp file in DIR holds it).
make_venv() {
  local venv=$1
  shift
  local stamp="$venv/.psrt-packages"
  if [ "$(cat "$stamp" 2>/dev/null)" != "$*" ]; then
    echo "setup: making $venv with $*"
    $SUDO mkdir -p "$(dirname "$venv")"
    [ -x "$venv/bin/python" ] || $SUDO /usr/bin/python3 -m venv "$venv"
    $SUDO "$venv/bin/pip" install -q --disable-pip-version-check "$@"
    echo "$*" | $SUDO tee "$stamp" >/dev/null
  fi
}
# tensorboard 2.15 predates NumPy 2.
make_venv /opt/psrt/venv tensorboard==2.15.1 tfrecord==1.14.6 "numpy<2"
# Real TensorFlow and ONNX Runtime, in their own environment (TensorFlow
# 2.21 needs NumPy 2 and a newer tensorboard than the pins above): the
# readers that check what //chief:export writes and the writers of the
# TFRecord files our input pipeline must read.
# tf2onnx is what Keras 3's model.export(format="onnx") calls on the
# TensorFlow backend (examples/onnx/make_keras_models.py).
make_venv /opt/psrt/venv-tf "tensorflow-cpu==2.21.*" "onnxruntime==1.32.*" "onnx==1.23.*" "tf2onnx==1.17.*"
# PyTorch, on request only (no test needs it; PyPI's wheel brings CUDA's
# libraries, ~3 GB): the baseline of the comparisons against PyTorch and
# the exporter of the example ONNX models.
if [ "$torch" = 1 ]; then
  make_venv /opt/psrt/venv-torch "torch==2.15.*" "onnx==1.23.*" "onnxscript" "numpy"
fi
echo "setup: done"
