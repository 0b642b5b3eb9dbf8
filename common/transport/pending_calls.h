// PendingCalls: the calls in flight on a framed channel (ps_stream.h,
// ps_tcp_channel.h), by id, and the connections still reading answers.
// Each call is ended exactly once: whoever Takes it (its answer, its
// connection's end, an Expire, or the sender itself when a frame could not
// be sent) runs its `done`; everyone else finds it gone.
//
// Shared (std::shared_ptr) between a channel and its connections, which may
// outlive it by their last callbacks. Thread-safe.
#ifndef PSRT_COMMON_TRANSPORT_PENDING_CALLS_H_
#define PSRT_COMMON_TRANSPORT_PENDING_CALLS_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/transport/ps_call_channel.h"
#include "common/transport/ps_frame.h"

namespace psrt {

class PendingCalls {
 public:
  using Done = PsCallChannel::Done;
  struct Call {
    Done done;  // null when the call had ended already
    uint64_t connection = 0;
    psframe::Method method = psframe::Method::kPull;
  };

  // Registers a call sent on `connection`; returns its id.
  uint64_t Add(Done done, uint64_t connection, psframe::Method method) {
    absl::MutexLock lock(&mu_);
    const uint64_t id = next_id_++;
    calls_.emplace(id, Call{std::move(done), connection, method});
    return id;
  }
  // An id no call has (for a call ended before it was sent).
  uint64_t NewId() {
    absl::MutexLock lock(&mu_);
    return next_id_++;
  }
  // The call if it has not ended yet (it is ended now: its `done` is the
  // caller's to run); a Call with an empty `done` otherwise.
  Call Take(uint64_t id) {
    absl::MutexLock lock(&mu_);
    auto it = calls_.find(id);
    if (it == calls_.end()) return Call{};
    Call c = std::move(it->second);
    calls_.erase(it);
    return c;
  }
  // Every call sent on `connection`, ended.
  std::vector<Done> TakeAll(uint64_t connection) {
    std::vector<Done> out;
    absl::MutexLock lock(&mu_);
    for (auto it = calls_.begin(); it != calls_.end();) {
      if (it->second.connection == connection) {
        out.push_back(std::move(it->second.done));
        calls_.erase(it++);
      } else {
        ++it;
      }
    }
    return out;
  }

  // Connections opened whose reading has not ended: a channel's destructor
  // waits for none (so none outlives its owner by more than its callbacks).
  void Opened() {
    absl::MutexLock lock(&mu_);
    ++live_;
  }
  void Gone() {
    absl::MutexLock lock(&mu_);
    --live_;
  }
  bool WaitAllGone(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto none = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return live_ == 0; };
    return mu_.AwaitWithTimeout(absl::Condition(&none), timeout);
  }

 private:
  absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, Call> calls_ ABSL_GUARDED_BY(mu_);
  int live_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace psrt

#endif  // PSRT_COMMON_TRANSPORT_PENDING_CALLS_H_
