// SourceLimit: how many connections one source address may have open that
// have not authenticated yet (sent a valid hello, ticket or token), so one
// stranger cannot take every slot of a listener that admits connections
// before it knows who they are. An authenticated connection gives its
// place back and counts no more. Addresses are compared without the port;
// an IPv4-mapped IPv6 address is its IPv4 address.
//
// Refusals are said at most once per `log_every` (a flood must not become a
// flood of log lines): Refuse() returns the line to log, or "" to stay quiet.
//
//   SourceLimit limit(64, "TCP data plane (--max_unauthenticated_per_source)");
//   std::optional<SourceLimit::Place> place = limit.Take(SourceAddress(addr));
//   if (!place) { std::string line = limit.Refuse(source); ...close... }
//   ...hello checked...
//   place->Release();  // authenticated: no longer counted
//
// Thread-safe. A Place must not outlive its SourceLimit.
#ifndef PSRT_COMMON_NET_SOURCE_LIMIT_H_
#define PSRT_COMMON_NET_SOURCE_LIMIT_H_

#include <sys/socket.h>

#include <cstdint>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace psrt {
namespace net {

// The address of `addr` without its port ("127.0.0.2", "::1"); "?" for a
// family other than IPv4 and IPv6.
std::string SourceAddress(const sockaddr_storage& addr);

class SourceLimit {
 public:
  // `max_per_source` <= 0: no limit (every Take succeeds, nothing is counted).
  // `what` names the listener and how to raise its limit in log lines
  // ("TCP data plane (--max_unauthenticated_per_source)").
  SourceLimit(int max_per_source, std::string what, absl::Duration log_every = absl::Seconds(10));

  // One unauthenticated connection's place; given back on Release() or
  // destruction. Move-only.
  class Place {
   public:
    Place(Place&& o) noexcept;
    Place& operator=(Place&& o) noexcept;
    Place(const Place&) = delete;
    Place& operator=(const Place&) = delete;
    ~Place() { Release(); }
    void Release();

   private:
    friend class SourceLimit;
    Place(SourceLimit* limit, std::string source) : limit_(limit), source_(std::move(source)) {}
    SourceLimit* limit_ = nullptr;  // not owned; null once released
    std::string source_;
  };

  // A place for one more connection from `source`, or nullopt when it
  // holds max_per_source already.
  std::optional<Place> Take(const std::string& source);

  // Counts a refusal of `source`; returns the log line saying so (with how
  // many were refused since the last line), or "" when a line was returned
  // less than log_every ago.
  std::string Refuse(const std::string& source);

  int max_per_source() const { return max_; }
  // Unauthenticated connections `source` holds now.
  int held(const std::string& source) const;
  // Refusals since this limit was made.
  int64_t refused() const;

 private:
  void Give(const std::string& source);

  const int max_;
  const std::string what_;
  const absl::Duration log_every_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, int> held_ ABSL_GUARDED_BY(mu_);
  int64_t refused_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t refused_unlogged_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_log_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace net
}  // namespace psrt

#endif  // PSRT_COMMON_NET_SOURCE_LIMIT_H_
