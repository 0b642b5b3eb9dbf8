#include "common/compute/mirrored_devices_runner.h"

#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/collective/local_collective.h"
#include "common/graph/graph_builder.h"
#include "common/status_macros.h"

namespace psrt {
namespace {

constexpr int kMaxDevices = 64;

// Rows [begin, end) of every tensor of the batch (views, no copy).
Batch SliceBatch(const Batch& batch, int64_t begin, int64_t end) {
  Batch slice;
  slice.size = end - begin;
  slice.epoch = batch.epoch;
  for (const auto& [key, t] : batch.tensors) slice.tensors[key] = t.Slice(begin, end);
  return slice;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MirroredDevicesRunner>> MirroredDevicesRunner::Create(
    const WorkerAssignment& a, int devices, const DeviceFactory& make_device, const RanksFactory& make_ranks) {
  if (devices < 1 || devices > kMaxDevices) {
    return absl::InvalidArgumentError(absl::StrCat("local devices: ", devices, " is not in [1, ", kMaxDevices, "]"));
  }
  for (const FeatureDef& f : a.input().feature()) {
    if (f.kind() == FeatureDef::SPARSE) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mirrored devices split the batch by rows and reduce dense gradients only; feature \"", f.name(),
          "\" is sparse (an embedding): keep embeddings on parameter servers"));
    }
  }
  std::unique_ptr<MirroredDevicesRunner> r(new MirroredDevicesRunner());
  for (int d = 0; d < devices; ++d) {
    ASSIGN_OR_RETURN(std::unique_ptr<StepRunner> device, make_device(d));
    r->devices_.push_back(std::move(device));
  }
  for (const std::string& m : a.metric_node()) r->metrics_.push_back(ParseTensorName(m).first);
  if (make_ranks) {
    ASSIGN_OR_RETURN(r->ranks_, make_ranks(devices));
    if (static_cast<int>(r->ranks_.size()) != devices) {
      return absl::InternalError(absl::StrCat("the local all-reduce has ", r->ranks_.size(), " ranks for ", devices,
                                              " devices"));
    }
  } else {
    r->ranks_ = LocalCollectiveGroup::Create(devices);
  }
  return r;
}

std::string MirroredDevicesRunner::device() const {
  return absl::StrCat(devices_.size(), " x ", devices_[0]->device());
}

absl::StatusOr<StepResult> MirroredDevicesRunner::Run(const TensorMap& dense, const TensorMap& rows,
                                                      const Batch& batch, int64_t step) {
  const int n = static_cast<int>(devices_.size());
  if (n == 1) return devices_[0]->Run(dense, rows, batch, step);
  for (const auto& [key, t] : batch.tensors) {
    if (t.shape().rank() < 1 || t.shape().dim(0) != batch.size) {
      return absl::InvalidArgumentError(absl::StrCat("batch tensor ", key, " ", t.shape().ToString(),
                                                     " does not have the batch's ", batch.size, " rows"));
    }
  }
  // Each device: its slice's step, then its weighted gradients, loss and
  // metrics (end to end in one buffer) summed with the others in rank order.
  std::vector<absl::StatusOr<StepResult>> results(n, absl::UnknownError("not run"));
  std::vector<std::vector<float>> sums(n);
  std::vector<absl::Status> reduced(n);
  std::vector<std::thread> threads;
  const std::vector<std::string> variables = DenseVariables();
  auto device_step = [&](int d) {
    const int64_t begin = batch.size * d / n, end = batch.size * (d + 1) / n;
    const float weight = batch.size > 0 ? static_cast<float>(end - begin) / batch.size : 0;
    // Another seed per device: dropout masks differ between slices, and a
    // recomputed step still draws the same.
    if (end > begin) results[d] = devices_[d]->Run(dense, rows, SliceBatch(batch, begin, end), step * n + d);
    std::vector<float>& buf = sums[d];
    // An empty slice, or a device that failed, adds zeros: every rank must
    // join the all-reduce; the failure is reported after it.
    const StepResult* r = results[d].ok() ? &*results[d] : nullptr;
    for (const std::string& v : variables) {
      const Tensor* g = nullptr;
      if (r != nullptr) {
        auto it = r->dense_gradients.find(v);
        if (it != r->dense_gradients.end() && it->second.dtype() == DT_FLOAT) g = &it->second;
      }
      const int64_t count = g != nullptr ? g->NumElements() : dense.at(v).NumElements();
      const size_t at = buf.size();
      buf.resize(at + count, 0.0f);
      if (g != nullptr) {
        const float* src = g->data<float>();
        for (int64_t i = 0; i < count; ++i) buf[at + i] = weight * src[i];
      }
    }
    buf.push_back(r != nullptr ? weight * r->loss : 0.0f);
    for (const std::string& m : metrics_) {
      float value = 0;
      if (r != nullptr) {
        auto it = r->metrics.find(m);
        if (it != r->metrics.end()) value = weight * it->second;
      }
      buf.push_back(value);
    }
    reduced[d] = ranks_[d]->AllReduceSum(buf.data(), buf.size());
  };
  for (int d = 0; d < n; ++d) threads.emplace_back(device_step, d);
  for (std::thread& t : threads) t.join();
  for (int d = 0; d < n; ++d) {
    const int64_t begin = batch.size * d / n, end = batch.size * (d + 1) / n;
    if (end > begin && !results[d].ok()) return results[d].status();
    if (!reduced[d].ok()) return reduced[d];
  }
  // The sums, the same on every device; the first device that ran gives the
  // result's shape (with an empty batch none did: device 0 runs it whole).
  int first = 0;
  while (first < n && !results[first].ok()) ++first;
  if (first == n) return devices_[0]->Run(dense, rows, batch, step * n);
  StepResult out = *std::move(results[first]);
  const std::vector<float>& sum = sums[first];
  size_t at = 0;
  for (const std::string& v : variables) {
    Tensor& g = out.dense_gradients[v];
    std::memcpy(g.raw_data(), sum.data() + at, g.TotalBytes());
    at += g.NumElements();
  }
  out.loss = sum[at++];
  for (const std::string& m : metrics_) out.metrics[m] = sum[at++];
  return out;
}

}  // namespace psrt
