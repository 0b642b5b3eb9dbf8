// Subprocess: a child process started with posix_spawn-like semantics, its
// output handed line by line to a callback (or left on our stdout/stderr),
// killed and reaped when the object goes.
//
// The child dies with its parent (PR_SET_PDEATHSIG), so a launcher or test
// killed with SIGKILL leaves no orphan behind.
//
//   SubprocessOptions o;
//   o.argv = {"bazel-bin/ps/server", "--task=ps:0", ...};
//   o.on_line = [](absl::string_view l) { std::cout << "[ps:0] " << l << "\n"; };
//   ASSIGN_OR_RETURN(auto ps, Subprocess::Start(o));
//   ps->Signal(SIGKILL);
//   absl::StatusOr<int> status = ps->Wait(absl::Seconds(5));
//
// Methods are thread-safe.
#ifndef PSRT_COMMON_SUBPROCESS_H_
#define PSRT_COMMON_SUBPROCESS_H_

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace psrt {

struct SubprocessOptions {
  std::vector<std::string> argv;      // argv[0] is the program path
  std::vector<std::string> extra_env;  // "KEY=VALUE", added to ours
  // Gets each line of the child's stdout and stderr (merged), from a reader
  // thread. Null: the child writes straight to our stdout/stderr.
  std::function<void(absl::string_view)> on_line;
  // Called once from the reader thread after the last line, when the output
  // ends (every process holding it has closed it: the child and any
  // children it left). Only with on_line.
  std::function<void()> on_end;
};

class Subprocess {
 public:
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(const SubprocessOptions& options);
  // SIGKILLs the child if it still runs, reaps it, joins the reader.
  ~Subprocess();

  pid_t pid() const { return pid_; }
  // False if it has already been reaped.
  bool Signal(int sig);
  // The wait status once the child has exited, without blocking.
  std::optional<int> Poll();
  // Blocks until the child exits (its wait status) or `timeout` passes
  // (DEADLINE_EXCEEDED).
  absl::StatusOr<int> Wait(absl::Duration timeout = absl::InfiniteDuration());
  bool Running() { return !Poll().has_value(); }

 private:
  explicit Subprocess(pid_t pid) : pid_(pid) {}
  void ReaderLoop(int fd, std::function<void(absl::string_view)> on_line);

  const pid_t pid_;
  std::thread reader_;
  absl::Mutex mu_;
  std::optional<int> status_ ABSL_GUARDED_BY(mu_);
};

// A short human description of a wait status: "exit 0", "killed by SIGKILL".
std::string DescribeWaitStatus(int status);

// A TCP port on 127.0.0.1 that was free a moment ago: at random below the
// kernel's ephemeral range, and never the same one twice in a process.
absl::StatusOr<int> PickFreePort();

}  // namespace psrt

#endif  // PSRT_COMMON_SUBPROCESS_H_
