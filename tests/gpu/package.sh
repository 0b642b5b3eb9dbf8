#!/usr/bin/env bash
# Packs what the GPU checks need for a machine that has a GPU but not this
# build: the CUDA build of the GPU tests, the GPU step benchmark and the
# in-process trainer, the data-independent files they read, and every shared
# library they link except the C runtime and CUDA's own (that machine lacks
# Debian's gRPC, protobuf, RocksDB..., but its image has CUDA 13: nvcc and
# the nvidia-cublas and nvidia-nccl wheels beside PyTorch; cuBLAS is 600 MB and
# NCCL 200 MB, too big to carry).
# The result (about 30 MB) fits the device tool's 64 MiB carry limit.
#
#   tests/gpu/package.sh [OUT=.gpu]      # here, no GPU needed
#   OUT/run.sh                           # there: tests, benchmark, PyTorch baseline
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-.gpu}
targets=(//worker/gpu:gpu_kernels_test //worker/gpu:gpu_executor_test //worker:device_select_test
         //common/collective:nccl_local_collective_test
         //tests/bench:gpu_step_bench //deploy:local_train)
bazel build --config=cuda "${targets[@]}"
rm -rf "$out" && mkdir -p "$out/bin" "$out/lib" "$out/examples"
for t in "${targets[@]}"; do
  path=${t#//}; path=${path/://}
  cp "bazel-bin/$path" "$out/bin/"
done
cp examples/fashion_mnist_mlp.pbtxt examples/fashion_mnist_cnn.pbtxt "$out/examples/"
cp tests/gpu/torch_mlp_step.py "$out/"
for b in "$out"/bin/*; do
  ldd "$b" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libgcc_s.so*) ;;
    libcublas*|libcudart*|libnccl*) ;;
    *) cp -L "$lib" "$out/lib/" ;;
  esac
done
cat > "$out/run.sh" <<'RUN'
#!/usr/bin/env bash
# On the GPU machine: the GPU-vs-CPU tests, the step benchmark, PyTorch's
# step for the same MLP, and a short GPU training run if the data is there.
cd "$(dirname "$0")"
cuda_libs=$(python3 -c 'import os, nvidia.cublas as c; print(os.path.join(list(c.__path__)[0], "lib"))' 2>/dev/null)
nccl_libs=$(python3 -c 'import os, nvidia.nccl as c; print(os.path.join(list(c.__path__)[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH=$PWD/lib:${cuda_libs}:${nccl_libs}:/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi -L || true
rc=0
for t in gpu_kernels_test gpu_executor_test device_select_test nccl_local_collective_test; do
  echo "== $t"; ./bin/$t || rc=1
done
echo "== gpu_step_bench"; ./bin/gpu_step_bench || rc=1
echo "== PyTorch baseline"; python3 torch_mlp_step.py || true
if [ -d /usr/share/datasets/fashion-mnist ]; then
  echo "== local_train --device=gpu"; ./bin/local_train --job=examples/fashion_mnist_mlp.pbtxt --device=gpu || rc=1
fi
exit $rc
RUN
chmod +x "$out/run.sh"
du -sh "$out"
