#include "common/subprocess.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/container/flat_hash_set.h"
#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

extern char** environ;

namespace psrt {

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(const SubprocessOptions& options) {
  if (options.argv.empty()) return absl::InvalidArgumentError("empty argv");
  std::vector<char*> argv;
  for (const auto& a : options.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_storage;
  for (char** e = environ; *e != nullptr; ++e) env_storage.push_back(*e);
  for (const auto& e : options.extra_env) env_storage.push_back(e);
  std::vector<char*> envp;
  for (auto& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);

  int fds[2] = {-1, -1};
  if (options.on_line && ::pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    // Child: only async-signal-safe calls from here to exec.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl
    if (fds[1] >= 0) {
      ::dup2(fds[1], 1);
      ::dup2(fds[1], 2);
    }
    ::execve(argv[0], argv.data(), envp.data());
    const char msg[] = "subprocess: exec failed\n";
    (void)!::write(2, msg, sizeof(msg) - 1);
    ::_exit(127);
  }
  auto p = std::unique_ptr<Subprocess>(new Subprocess(pid));
  if (options.on_line) {
    ::close(fds[1]);
    p->reader_ = std::thread([sp = p.get(), fd = fds[0], cb = options.on_line, end = options.on_end] {
      sp->ReaderLoop(fd, cb);
      if (end) end();
    });
  }
  return p;
}

void Subprocess::ReaderLoop(int fd, std::function<void(absl::string_view)> on_line) {
  std::string pending;
  char buf[4096];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, n);
    size_t start = 0, nl;
    while ((nl = pending.find('\n', start)) != std::string::npos) {
      on_line(absl::string_view(pending).substr(start, nl - start));
      start = nl + 1;
    }
    pending.erase(0, start);
  }
  if (!pending.empty()) on_line(pending);
  ::close(fd);
}

Subprocess::~Subprocess() {
  if (Running()) {
    Signal(SIGKILL);
    (void)Wait();
  }
  if (reader_.joinable()) reader_.join();
}

bool Subprocess::Signal(int sig) {
  absl::MutexLock lock(&mu_);
  if (status_.has_value()) return false;
  return ::kill(pid_, sig) == 0;
}

std::optional<int> Subprocess::Poll() {
  absl::MutexLock lock(&mu_);
  if (!status_.has_value()) {
    int status;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) status_ = status;
  }
  return status_;
}

absl::StatusOr<int> Subprocess::Wait(absl::Duration timeout) {
  absl::Time deadline = timeout == absl::InfiniteDuration() ? absl::InfiniteFuture()
                                                             : absl::Now() + timeout;
  absl::Duration nap = absl::Microseconds(200);
  while (true) {
    if (auto s = Poll()) return *s;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("process ", pid_, " still running after ", absl::FormatDuration(timeout)));
    }
    // waitpid has no timeout; poll with a growing nap (a wait on the
    // child, not a sleep standing in for one).
    absl::SleepFor(nap);
    nap = std::min(nap * 2, absl::Milliseconds(20));
  }
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    const char* name = sigabbrev_np(sig);
    return absl::StrCat("killed by SIG", name ? name : std::to_string(sig));
  }
  return absl::StrCat("status ", status);
}

namespace {

// Binds 127.0.0.1:port (0: any) and returns the port it got, or 0.
int BindOnce(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof(addr);
  int got = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    got = ntohs(addr.sin_port);
  }
  ::close(fd);
  return got;
}

// The first port of the kernel's ephemeral range (outgoing connections and
// binds to port 0 take theirs from it), or 0 if it cannot be read.
int EphemeralLow() {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0, high = 0;
  if (!(range >> low >> high)) return 0;
  return low;
}

}  // namespace

absl::StatusOr<int> PickFreePort() {
  // A port handed out here is bound by its daemon only later (after a spec
  // is written, a process started), and a restarted PS binds the same port
  // again. A port from the ephemeral range could meanwhile become the local
  // end of some client's outgoing connection (seen: a restarted ps:0 whose
  // port was taken), so pick at random below that range, where only
  // explicit binds go, and never the same port twice in one process.
  static absl::Mutex mu(absl::kConstInit);
  static auto* handed_out = new absl::flat_hash_set<int>();
  static auto* bits = new absl::BitGen();
  constexpr int kLowest = 10000;
  const int ephemeral_low = EphemeralLow();
  absl::MutexLock lock(&mu);
  if (ephemeral_low > kLowest + 1000) {
    for (int attempt = 0; attempt < 200; ++attempt) {
      const int port = absl::Uniform(*bits, kLowest, ephemeral_low);
      if (handed_out->contains(port) || BindOnce(port) != port) continue;
      handed_out->insert(port);
      return port;
    }
  }
  for (int attempt = 0; attempt < 20; ++attempt) {
    const int port = BindOnce(0);
    if (port == 0) return absl::InternalError(absl::StrCat("bind 127.0.0.1:0: ", std::strerror(errno)));
    if (handed_out->insert(port).second) return port;
  }
  return absl::InternalError("no free TCP port on 127.0.0.1");
}

}  // namespace psrt
