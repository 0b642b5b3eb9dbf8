#include "common/collective/local_collective.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/collective/float_add.h"

namespace psrt {
namespace {

enum class Op { kAllReduceSum, kBroadcast };


// State shared by the ranks of one group.
class SharedGroup {
 public:
  SharedGroup(int n, absl::Duration timeout) : n_(n), timeout_(timeout), ptrs_(n, nullptr) {}

  // The whole call for rank `rank`; see the file comment of the header.
  absl::Status Run(int rank, Op op, float* data, size_t n, int root) {
    if (n_ == 1) {
      absl::MutexLock lock(&mu_);
      return broken_;
    }
    // Phase 1: arrive, publish the buffer, check that every rank agrees.
    absl::Status st = Arrive(rank, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      if (arrived_ == 0) {
        op_ = op;
        count_ = n;
        root_ = root;
        if (op == Op::kAllReduceSum) result_.resize(n);
      } else if (op_ != op || count_ != n || root_ != root) {
        return BreakLocked(absl::InvalidArgumentError(absl::StrCat(
            "rank ", rank, " called a different collective than the others (n=", n, " vs ", count_, ")")));
      }
      ptrs_[rank] = data;
      return absl::OkStatus();
    });
    if (!st.ok()) return st;
    // Phase 2: work on this rank's slice, reading every rank's buffer.
    const size_t begin = count_ * rank / n_, end = count_ * (rank + 1) / n_;
    if (op == Op::kAllReduceSum && end > begin) {
      float* out = result_.data() + begin;
      std::memcpy(out, ptrs_[0] + begin, (end - begin) * sizeof(float));
      for (int i = 1; i < n_; ++i) AddFloats(out, ptrs_[i] + begin, end - begin);
    }
    (void)Rejoin();  // the status is reported by the last Rejoin
    // Phase 3: every buffer gets the result (even if the group broke in the
    // meantime: the bytes are ready). The last Rejoin keeps every rank's
    // buffer, result_ and ptrs_ alive until every rank has copied.
    if (n > 0) {
      const float* src = op == Op::kAllReduceSum ? result_.data() : ptrs_[root];
      if (src != data) std::memcpy(data, src, n * sizeof(float));
    }
    return Rejoin();
  }

  void Abort(int rank) {
    absl::MutexLock lock(&mu_);
    (void)BreakLocked(absl::AbortedError(absl::StrCat("collective aborted (by rank ", rank, ")")));
  }

 private:
  // The call's first barrier: waits until all n ranks arrive, the group
  // breaks, or the timeout passes (which breaks the group). Either every
  // rank passes or none does. `on_arrive` runs under the lock before this
  // rank counts as arrived.
  template <typename F>
  absl::Status Arrive(int rank, F on_arrive) {
    absl::MutexLock lock(&mu_);
    if (!broken_.ok()) return broken_;
    absl::Status st = on_arrive();
    if (!st.ok()) return st;
    const uint64_t gen = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++generation_;
      return absl::OkStatus();
    }
    auto released = [this, gen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return generation_ != gen || !broken_.ok();
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&released), timeout_)) {
      return BreakLocked(absl::DeadlineExceededError(absl::StrCat(
          "rank ", rank, " waited ", absl::FormatDuration(timeout_), " for the other ranks")));
    }
    return generation_ != gen ? absl::OkStatus() : broken_;
  }

  // The later barriers of a call that every rank passed Arrive for. Each
  // rank gets here after bounded in-process work, so this waits with no
  // timeout, and it waits even when the group broke meanwhile: returning
  // early would let a caller free a buffer another rank still reads.
  // Returns the group's status.
  absl::Status Rejoin() {
    absl::MutexLock lock(&mu_);
    const uint64_t gen = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++generation_;
    } else {
      auto released = [this, gen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return generation_ != gen; };
      mu_.Await(absl::Condition(&released));
    }
    return broken_;
  }

  absl::Status BreakLocked(absl::Status st) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (broken_.ok()) broken_ = st;
    return broken_;
  }

  const int n_;
  const absl::Duration timeout_;
  absl::Mutex mu_;
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  // Set by the first rank to arrive, read by all between the barriers
  // (the barriers order the accesses).
  Op op_ = Op::kAllReduceSum;
  size_t count_ = 0;
  int root_ = 0;
  std::vector<float*> ptrs_;
  std::vector<float> result_;
};

class LocalCollective : public Collective {
 public:
  LocalCollective(std::shared_ptr<SharedGroup> group, int rank, int size)
      : group_(std::move(group)), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::Status AllReduceSum(float* data, size_t n) override {
    return group_->Run(rank_, Op::kAllReduceSum, data, n, 0);
  }
  absl::Status Broadcast(float* data, size_t n, int root) override {
    if (root < 0 || root >= size_) {
      return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " is not a rank of ", size_));
    }
    return group_->Run(rank_, Op::kBroadcast, data, n, root);
  }
  void Abort() override { group_->Abort(rank_); }

 private:
  const std::shared_ptr<SharedGroup> group_;
  const int rank_, size_;
};

}  // namespace

std::vector<std::unique_ptr<Collective>> LocalCollectiveGroup::Create(int n, absl::Duration timeout) {
  n = std::max(n, 1);
  auto group = std::make_shared<SharedGroup>(n, timeout);
  std::vector<std::unique_ptr<Collective>> ranks;
  for (int i = 0; i < n; ++i) ranks.push_back(std::make_unique<LocalCollective>(group, i, n));
  return ranks;
}

}  // namespace psrt
