// Built without --config=cuda: no NCCL group can be created.
#include "common/cuda/nccl_local.h"

namespace psrt {
namespace cuda {
namespace {
NcclResult NotBuilt() { return {NcclCode::kUnavailable, "built without CUDA (build with --config=cuda)"}; }
}  // namespace

NcclResult NcclLocalCreate(int, NcclLocalComms** out) {
  *out = nullptr;
  return NotBuilt();
}
void NcclLocalDestroy(NcclLocalComms*) {}
NcclResult NcclLocalAllReduceSum(NcclLocalComms*, int, float*, size_t, int64_t, const std::atomic<bool>*) {
  return NotBuilt();
}
NcclResult NcclLocalBroadcast(NcclLocalComms*, int, float*, size_t, int, int64_t, const std::atomic<bool>*) {
  return NotBuilt();
}

}  // namespace cuda
}  // namespace psrt
