// Helpers for tests that start real daemons: the path of a binary in the
// test's runfiles, a cluster spec on free loopback ports, and a process
// whose output lines are kept so a test can wait for one (with a deadline).
#ifndef PSRT_TESTS_HARNESS_PROCESS_HARNESS_H_
#define PSRT_TESTS_HARNESS_PROCESS_HARNESS_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/subprocess.h"

namespace psrt {
namespace testing {

// "ps/server" -> $TEST_SRCDIR/$TEST_WORKSPACE/ps/server.
std::string RunfilePath(const std::string& relative);

// A spec with one chief, `ps` PS and `workers` workers on free ports (free
// here, in this network namespace) of `host`, written to a temporary file;
// returns its path and the addresses.
struct TestCluster {
  std::string spec_path;
  std::string chief;
  std::vector<std::string> ps;
  std::vector<std::string> workers;
};
absl::StatusOr<TestCluster> MakeTestCluster(int ps, int workers, const std::string& name,
                                            const std::string& host = "127.0.0.1");

// "PID: command line" of every process but this one whose command line
// names `needle` (a run's cluster spec path: what of a job is left).
std::vector<std::string> ProcessesNaming(const std::string& needle);

// A daemon under test. Its lines go to the test log with a prefix and are
// kept for WaitForLine. Killed (SIGKILL) when destroyed.
class Daemon {
 public:
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(const std::string& name,
                                                       std::vector<std::string> argv);
  ~Daemon();

  // True once a line containing `text` has been printed (looking from line
  // number `from` on); false after `timeout`.
  bool WaitForLine(const std::string& text, absl::Duration timeout, size_t from = 0);
  // The first line matching `pattern` (ECMAScript regex) from line `from`
  // on, or "" after `timeout`.
  std::string WaitForMatch(const std::string& pattern, absl::Duration timeout, size_t from = 0);
  // Lines printed so far: a `from` for what comes after now.
  size_t lines() const;
  // A copy of the lines printed so far, from line number `from` on.
  std::vector<std::string> Lines(size_t from = 0) const;
  bool Kill(int sig) { return process_->Signal(sig); }
  // Waits for the process to exit (its wait status), then up to 10 s more
  // for the lines it printed before exiting to be read (a WaitForLine right
  // after Wait sees them, however loaded the machine).
  absl::StatusOr<int> Wait(absl::Duration timeout);
  Subprocess* process() { return process_.get(); }

 private:
  Daemon() = default;
  std::string name_;
  std::unique_ptr<Subprocess> process_;
  mutable absl::Mutex mu_;
  std::vector<std::string> lines_ ABSL_GUARDED_BY(mu_);
  bool output_ended_ ABSL_GUARDED_BY(mu_) = false;
};

// The resident memory of process `pid` now (VmRSS), in KiB; -1 when it is
// gone.
int64_t RssKb(pid_t pid);
// The most resident memory process `pid` has had (VmHWM), in KiB; -1 when
// it is gone.
int64_t PeakRssKb(pid_t pid);

}  // namespace testing
}  // namespace psrt

#endif  // PSRT_TESTS_HARNESS_PROCESS_HARNESS_H_
