#include "tests/bench/netns_pair.h"

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "common/subprocess.h"

namespace psrt {
namespace bench {

namespace {

// The path of a tool such as `ip`: Subprocess execs a path, not a name.
std::string ToolPath(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* env = std::getenv("PATH");
  std::vector<std::string> dirs = absl::StrSplit(env != nullptr ? env : "", ':', absl::SkipEmpty());
  for (const char* d : {"/usr/sbin", "/sbin", "/usr/bin", "/bin"}) dirs.push_back(d);
  for (const std::string& d : dirs) {
    const std::string path = absl::StrCat(d, "/", name);
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  return name;  // exec fails and says so
}

}  // namespace

absl::StatusOr<std::string> RunCommand(std::vector<std::string> argv) {
  if (argv.empty()) return absl::InvalidArgumentError("empty command");
  argv[0] = ToolPath(argv[0]);
  absl::Mutex mu;
  std::string out;
  SubprocessOptions o;
  o.argv = argv;
  o.on_line = [&](absl::string_view line) {
    absl::MutexLock lock(&mu);
    absl::StrAppend(&out, line, "\n");
  };
  absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(o);
  if (!p.ok()) return p.status();
  absl::StatusOr<int> status = (*p)->Wait(absl::Seconds(30));
  p->reset();  // joins the reader: `out` is whole
  if (!status.ok()) return status.status();
  if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
    return absl::InternalError(absl::StrCat("`", absl::StrJoin(argv, " "), "` failed (",
                                            DescribeWaitStatus(*status), "): ", absl::StripTrailingAsciiWhitespace(out)));
  }
  return out;
}

absl::StatusOr<int64_t> ParseRate(const std::string& rate) {
  const std::string r = absl::AsciiStrToLower(rate);
  for (const auto& [suffix, scale] : {std::pair<const char*, int64_t>{"gbit", 1000000000},
                                      {"mbit", 1000000}, {"kbit", 1000}, {"bit", 1}, {"", 1}}) {
    int64_t v = 0;
    if (absl::EndsWith(r, suffix) && absl::SimpleAtoi(r.substr(0, r.size() - std::strlen(suffix)), &v) && v > 0) {
      return v * scale;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("rate \"", rate, "\": want e.g. 10gbit, 1gbit, 500mbit"));
}

NetnsPair::NetnsPair()
    : server_ns_(absl::StrCat("psrt-bench-ps-", ::getpid())),
      client_ns_(absl::StrCat("psrt-bench-wk-", ::getpid())),
      server_if_(absl::StrCat("psrtv", ::getpid(), "s")),
      client_if_(absl::StrCat("psrtv", ::getpid(), "c")) {}

absl::StatusOr<std::unique_ptr<NetnsPair>> NetnsPair::Create() {
  std::unique_ptr<NetnsPair> pair(new NetnsPair());
  absl::StatusOr<std::string> made = RunCommand({"ip", "netns", "add", pair->server_ns_});
  if (!made.ok()) {
    absl::MutexLock lock(&pair->mu_);
    pair->removed_ = true;  // nothing made
    return absl::PermissionDeniedError(made.status().message());
  }
  // From here on the destructor removes whatever was made.
  const std::string s = pair->server_ns_, c = pair->client_ns_;
  const std::string si = pair->server_if_, ci = pair->client_if_;
  const std::vector<std::vector<std::string>> steps = {
      {"ip", "netns", "add", c},
      {"ip", "link", "add", si, "type", "veth", "peer", "name", ci},
      {"ip", "link", "set", si, "netns", s},
      {"ip", "link", "set", ci, "netns", c},
      {"ip", "-n", s, "addr", "add", "169.254.77.1/30", "dev", si},
      {"ip", "-n", c, "addr", "add", "169.254.77.2/30", "dev", ci},
      {"ip", "-n", s, "link", "set", "lo", "up"},
      {"ip", "-n", c, "link", "set", "lo", "up"},
      {"ip", "-n", s, "link", "set", si, "up"},
      {"ip", "-n", c, "link", "set", ci, "up"},
  };
  for (const auto& step : steps) {
    absl::StatusOr<std::string> r = RunCommand(step);
    if (!r.ok()) return r.status();
  }
  return pair;
}

absl::StatusOr<std::unique_ptr<NetnsPair>> NetnsPair::CreateRemovedOnSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&signals, sig);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  absl::StatusOr<std::unique_ptr<NetnsPair>> pair = Create();
  if (!pair.ok()) return pair;
  NetnsPair* p = pair->get();
  std::thread([signals, p]() mutable {
    int sig = 0;
    sigwait(&signals, &sig);
    p->Remove();
    std::_Exit(128 + sig);
  }).detach();
  return pair;
}

NetnsPair::~NetnsPair() { Remove(); }

void NetnsPair::Remove() {
  absl::MutexLock lock(&mu_);
  if (removed_) return;
  removed_ = true;
  // A veth pair made before its ends moved lives in our namespace.
  (void)RunCommand({"ip", "link", "del", server_if_});
  (void)RunCommand({"ip", "netns", "del", client_ns_});
  (void)RunCommand({"ip", "netns", "del", server_ns_});
}

absl::Status NetnsPair::SetRate(int64_t bits_per_second) {
  const int64_t burst = std::max<int64_t>(256 << 10, bits_per_second / 8 / 250);
  for (const auto& [ns, dev] : {std::pair{server_ns_, server_if_}, std::pair{client_ns_, client_if_}}) {
    absl::StatusOr<std::string> r =
        RunCommand({"tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf", "rate",
                    absl::StrCat(bits_per_second, "bit"), "burst", absl::StrCat(burst), "latency", "50ms"});
    if (!r.ok()) return r.status();
  }
  return absl::OkStatus();
}

std::vector<std::string> NetnsPair::In(const std::string& ns, std::vector<std::string> command) {
  std::vector<std::string> argv = {ToolPath("ip"), "netns", "exec", ns};
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

}  // namespace bench
}  // namespace psrt
