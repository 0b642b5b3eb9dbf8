// Kernels: the code that runs one op on one device.
//
// A kernel reads ctx.inputs and fills ctx.outputs (one per op output). It
// checks what shape inference could not (runtime dims) and returns an error
// naming the node. Kernels for a device are looked up by op name; the CPU
// ones run on Eigen with the executor's thread pool.
#ifndef PSRT_COMMON_COMPUTE_KERNELS_KERNEL_H_
#define PSRT_COMMON_COMPUTE_KERNELS_KERNEL_H_

#ifndef EIGEN_USE_THREADS
#define EIGEN_USE_THREADS
#endif

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/tensor.h"
#include "proto/graph.pb.h"
#include "unsupported/Eigen/CXX11/Tensor"

namespace psrt {

struct KernelContext {
  const NodeDef* node = nullptr;
  std::vector<Tensor> inputs;
  std::vector<Tensor> outputs;
  const Eigen::ThreadPoolDevice* device = nullptr;
  bool training = true;
  uint64_t seed = 0;  // differs per step (dropout masks)

  absl::Status Error(absl::string_view what) const;
};

using Kernel = std::function<absl::Status(KernelContext&)>;

// Kernels by op name; K is the kernel type of a device.
template <typename K>
class KernelTable {
 public:
  const K* Find(const std::string& op) const {
    auto it = kernels_.find(op);
    return it == kernels_.end() ? nullptr : &it->second;
  }
  void Register(const std::string& op, K k) { kernels_[op] = std::move(k); }

 private:
  std::map<std::string, K> kernels_;
};

class KernelRegistry : public KernelTable<Kernel> {
 public:
  static const KernelRegistry& Cpu();
};

void RegisterCpuBasicKernels(KernelRegistry* r);
void RegisterCpuNnKernels(KernelRegistry* r);
void RegisterCpuMathKernels(KernelRegistry* r);
void RegisterCpuSequenceKernels(KernelRegistry* r);

// Row-major Eigen tensor views of our tensors.
template <int Rank>
using TMap = Eigen::TensorMap<Eigen::Tensor<float, Rank, Eigen::RowMajor>, Eigen::Aligned>;
template <int Rank>
using UMap = Eigen::TensorMap<Eigen::Tensor<float, Rank, Eigen::RowMajor>>;

inline UMap<2> AsMatrix(Tensor& t, int64_t rows, int64_t cols) {
  return UMap<2>(t.data<float>(), rows, cols);
}
inline UMap<1> AsVector(Tensor& t) { return UMap<1>(t.data<float>(), t.NumElements()); }

}  // namespace psrt

#endif  // PSRT_COMMON_COMPUTE_KERNELS_KERNEL_H_
