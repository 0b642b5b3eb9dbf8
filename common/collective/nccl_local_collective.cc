#include "common/collective/nccl_local_collective.h"

#include <atomic>

#include "absl/strings/str_cat.h"
#include "common/cuda/nccl_local.h"

namespace psrt {
namespace {

// Owns the communicators; every rank object holds it.
struct SharedComms {
  cuda::NcclLocalComms* comms = nullptr;
  std::atomic<bool> aborted{false};
  ~SharedComms() { cuda::NcclLocalDestroy(comms); }
};

absl::Status ToStatus(const cuda::NcclResult& r, int rank) {
  const std::string what = absl::StrCat("NCCL rank ", rank, ": ", r.message);
  switch (r.code) {
    case cuda::NcclCode::kOk:
      return absl::OkStatus();
    case cuda::NcclCode::kDeadline:
      return absl::DeadlineExceededError(what);
    case cuda::NcclCode::kAborted:
      return absl::AbortedError(what);
    case cuda::NcclCode::kInvalid:
      return absl::InvalidArgumentError(what);
    case cuda::NcclCode::kUnavailable:
      break;
  }
  return absl::UnavailableError(what);
}

class NcclRank : public Collective {
 public:
  NcclRank(std::shared_ptr<SharedComms> shared, int rank, int size, absl::Duration timeout)
      : shared_(std::move(shared)), rank_(rank), size_(size), timeout_ms_(absl::ToInt64Milliseconds(timeout)) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  absl::Status AllReduceSum(float* data, size_t n) override {
    return ToStatus(cuda::NcclLocalAllReduceSum(shared_->comms, rank_, data, n, timeout_ms_, &shared_->aborted), rank_);
  }

  absl::Status Broadcast(float* data, size_t n, int root) override {
    if (root < 0 || root >= size_) {
      return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " is not in [0, ", size_, ")"));
    }
    return ToStatus(cuda::NcclLocalBroadcast(shared_->comms, rank_, data, n, root, timeout_ms_, &shared_->aborted),
                    rank_);
  }

  void Abort() override { shared_->aborted.store(true); }

 private:
  std::shared_ptr<SharedComms> shared_;
  const int rank_;
  const int size_;
  const int64_t timeout_ms_;
};

}  // namespace

absl::StatusOr<std::vector<std::unique_ptr<Collective>>> NcclLocalGroup::Create(int n, absl::Duration timeout) {
  if (n < 1) return absl::InvalidArgumentError(absl::StrCat("an NCCL group needs at least 1 rank, not ", n));
  auto shared = std::make_shared<SharedComms>();
  cuda::NcclResult r = cuda::NcclLocalCreate(n, &shared->comms);
  if (!r.ok()) return absl::FailedPreconditionError(absl::StrCat("no NCCL group of ", n, " GPUs: ", r.message));
  std::vector<std::unique_ptr<Collective>> ranks;
  for (int i = 0; i < n; ++i) ranks.push_back(std::make_unique<NcclRank>(shared, i, n, timeout));
  return ranks;
}

}  // namespace psrt
