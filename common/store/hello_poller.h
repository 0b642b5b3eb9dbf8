// HelloPoller: one thread that holds every connection still awaiting its
// hello, so that nothing a caller has not authenticated holds a thread of
// its own (issue #28: 1,024 connections trickling their hellos held 1,024
// thread stacks, ~40 MB of a PS).
//
// It reads each hello (`hello_bytes` long) as its bytes come (epoll,
// level-triggered, reads that never wait), never past the hello's last
// byte, and reports each connection once through `done`: with the hello's
// bytes, or with why there are none: DEADLINE_EXCEEDED once the whole
// hello's deadline has passed (however steadily its bytes trickle in),
// UNAVAILABLE when the peer closed or reset it (or its owner shut it down
// to evict it), CANCELLED at Shutdown. Peers' bytes are not interpreted.
//
// The poller does not own the descriptors: an fd given to Add must stay
// open until its `done` has been called; it is out of the poller's set by
// then.
//
//   auto poller = HelloPoller::Start(tcpframe::kHelloBytes, OnHello);
//   (*poller)->Add(id, fd, accepted + hello_timeout);
//   ...
//   (*poller)->Shutdown();  // every connection not yet reported: CANCELLED
//
// `done` runs on the poller's thread (on the caller's at Shutdown, and in
// Add after it) and must not call back into the poller. Add, pending and
// Shutdown are thread-safe.
#ifndef PSRT_COMMON_STORE_HELLO_POLLER_H_
#define PSRT_COMMON_STORE_HELLO_POLLER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/net/socket.h"

namespace psrt {

class HelloPoller {
 public:
  // `hello`: exactly the hello's bytes, or why none came.
  using Done = std::function<void(uint64_t id, absl::StatusOr<std::string> hello)>;

  // Starts the thread; hellos are `hello_bytes` (> 0) long. INTERNAL when
  // epoll or eventfd cannot be made.
  static absl::StatusOr<std::unique_ptr<HelloPoller>> Start(size_t hello_bytes, Done done);
  ~HelloPoller();  // Shutdown()

  // Awaits the hello of `fd` (not owned; its reads may block or not) until
  // `deadline`. `id` must be unique among connections not yet reported.
  // After Shutdown, reports CANCELLED at once.
  void Add(uint64_t id, int fd, absl::Time deadline);

  // Connections added and not yet reported.
  int pending() const;

  // Stops the thread, then reports every connection still held as
  // CANCELLED (on the caller's thread). Idempotent.
  void Shutdown();

 private:
  struct Entry {
    int fd = -1;
    absl::Time deadline;
    size_t got = 0;
    std::string hello;  // hello_bytes_, filled up to `got`
  };

  HelloPoller(size_t hello_bytes, Done done, net::Fd epoll, net::Fd wake);
  void Loop();
  // Takes the connections Add queued into the epoll set.
  void AdoptAdded();
  // Reads what `id`'s peer has sent (at most the hello's rest); reports it
  // when the hello is whole or the connection is done for.
  void ReadSome(uint64_t id);
  // Drops `id` from the set and reports `result`.
  void Finish(uint64_t id, absl::StatusOr<std::string> result);

  const size_t hello_bytes_;
  const Done done_;
  const net::Fd epoll_;
  const net::Fd wake_;  // eventfd: Add and Shutdown wake the loop
  std::thread thread_;

  // The loop's own, not guarded: touched by its thread only (and by
  // Shutdown once that thread has been joined).
  absl::flat_hash_map<uint64_t, Entry> held_;
  std::set<std::pair<absl::Time, uint64_t>> deadlines_;

  mutable absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::pair<uint64_t, Entry>> added_ ABSL_GUARDED_BY(mu_);
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<bool> stop_{false};
};

}  // namespace psrt

#endif  // PSRT_COMMON_STORE_HELLO_POLLER_H_
