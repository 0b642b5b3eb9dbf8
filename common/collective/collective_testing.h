// Helpers for tests of collectives (testonly): run one thread per rank, and
// bind a group's listeners on loopback.
#ifndef PSRT_COMMON_COLLECTIVE_COLLECTIVE_TESTING_H_
#define PSRT_COMMON_COLLECTIVE_COLLECTIVE_TESTING_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/collective/tcp_ring.h"

namespace psrt {
namespace testing {

// Runs fn(rank) for rank in [0, n) on one thread each; returns their statuses.
inline std::vector<absl::Status> OnEachRank(int n, const std::function<absl::Status(int)>& fn) {
  std::vector<absl::Status> st(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { st[r] = fn(r); });
  for (auto& t : threads) t.join();
  return st;
}

// n listeners on 127.0.0.1 (any port) and their "host:port" by rank.
struct LoopbackListeners {
  std::vector<std::unique_ptr<CollectiveListener>> l;
  std::vector<std::string> peers;
};

inline absl::StatusOr<LoopbackListeners> BindLoopback(int n) {
  LoopbackListeners out;
  for (int i = 0; i < n; ++i) {
    auto l = CollectiveListener::Bind("127.0.0.1", 0);
    if (!l.ok()) return l.status();
    out.peers.push_back(absl::StrCat("127.0.0.1:", (*l)->port()));
    out.l.push_back(std::move(*l));
  }
  return out;
}

}  // namespace testing
}  // namespace psrt

#endif  // PSRT_COMMON_COLLECTIVE_COLLECTIVE_TESTING_H_
