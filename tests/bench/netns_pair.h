// NetnsPair: two network namespaces joined by a veth pair, for measuring a
// client and a server as if on two hosts. The server side is 169.254.77.1,
// the client side 169.254.77.2 (link-local /30); names carry our pid, so
// runs side by side do not meet. Everything is made with `ip` and `tc` and
// removed by the destructor (deleting a namespace deletes its veth end and
// with it the pair), and by Create itself when a step fails.
//
//   absl::StatusOr<std::unique_ptr<NetnsPair>> pair = NetnsPair::Create();
//   if (!pair.ok()) { skip: no rights to make namespaces }
//   (*pair)->SetRate(1'000'000'000);                  // tbf on both ends
//   argv = (*pair)->In((*pair)->server_ns(), {"server", ...});
#ifndef PSRT_TESTS_BENCH_NETNS_PAIR_H_
#define PSRT_TESTS_BENCH_NETNS_PAIR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace psrt {
namespace bench {

class NetnsPair {
 public:
  // PERMISSION_DENIED (with `ip`'s words) when `ip netns add` fails: no
  // rights; another error naming the command that failed.
  static absl::StatusOr<std::unique_ptr<NetnsPair>> Create();
  // As Create, and the pair is removed also when this process is sent
  // SIGINT, SIGTERM or SIGHUP (it then exits with 128 + the signal), by a
  // thread that waits for them. REQUIRES: no thread started yet (the
  // signals are blocked here, and each thread started later inherits that).
  static absl::StatusOr<std::unique_ptr<NetnsPair>> CreateRemovedOnSignals();
  ~NetnsPair();

  const std::string& server_ns() const { return server_ns_; }
  const std::string& client_ns() const { return client_ns_; }
  static const char* server_address() { return "169.254.77.1"; }
  // The veth end inside client_ns() (its counters in that namespace's
  // /proc/net/dev are the link's bytes each way).
  const std::string& client_if() const { return client_if_; }

  // A tc tbf qdisc of `bits_per_second` on both veth ends (each direction
  // limited), replacing any before; burst 4 ms of traffic (at least 256
  // KiB).
  absl::Status SetRate(int64_t bits_per_second);

  // argv running `command` inside namespace `ns`.
  static std::vector<std::string> In(const std::string& ns, std::vector<std::string> command);

  // Removes what this pair made, once; a second caller (the destructor
  // while a signal's thread removes) waits until it is gone.
  void Remove();

 private:
  NetnsPair();
  const std::string server_ns_, client_ns_, server_if_, client_if_;
  absl::Mutex mu_;
  bool removed_ ABSL_GUARDED_BY(mu_) = false;
};

// The output of a command, or an error naming it and what it said.
// argv[0] may be a name looked up in PATH, /usr/sbin and /sbin.
absl::StatusOr<std::string> RunCommand(std::vector<std::string> argv);

// "10gbit", "1gbit", "500mbit", "100kbit" or a plain number of bits/s.
absl::StatusOr<int64_t> ParseRate(const std::string& rate);

}  // namespace bench
}  // namespace psrt

#endif  // PSRT_TESTS_BENCH_NETNS_PAIR_H_
