#include "tests/harness/process_harness.h"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <regex>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace psrt {
namespace testing {

std::string RunfilePath(const std::string& relative) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  if (srcdir == nullptr) return relative;
  return absl::StrCat(srcdir, "/", ws ? ws : "psrt", "/", relative);
}

absl::StatusOr<TestCluster> MakeTestCluster(int ps, int workers, const std::string& name, const std::string& host) {
  TestCluster c;
  // A port is free only until it is used, so the kernel may hand the same
  // one out twice in a row: keep picking until each task has its own.
  std::set<int> taken;
  auto addr = [&]() -> absl::StatusOr<std::string> {
    for (int attempt = 0; attempt < 100; ++attempt) {
      absl::StatusOr<int> port = PickFreePort();
      if (!port.ok()) return port.status();
      if (taken.insert(*port).second) return absl::StrCat(host, ":", *port);
    }
    return absl::UnavailableError("no distinct free ports after 100 picks");
  };
  absl::StatusOr<std::string> chief = addr();
  if (!chief.ok()) return chief.status();
  c.chief = *chief;
  for (int i = 0; i < ps; ++i) {
    auto a = addr();
    if (!a.ok()) return a.status();
    c.ps.push_back(*a);
  }
  for (int i = 0; i < workers; ++i) {
    auto a = addr();
    if (!a.ok()) return a.status();
    c.workers.push_back(*a);
  }
  auto quote = [](const std::vector<std::string>& v) {
    std::vector<std::string> q;
    for (const auto& s : v) q.push_back(absl::StrCat("\"", s, "\""));
    return absl::StrJoin(q, ", ");
  };
  const char* tmp = std::getenv("TEST_TMPDIR");
  c.spec_path = absl::StrCat(tmp ? tmp : "/tmp", "/", name, ".json");
  std::ofstream(c.spec_path) << "{\"chief\": [\"" << c.chief << "\"], \"ps\": [" << quote(c.ps) << "], \"worker\": ["
                             << quote(c.workers) << "]}\n";
  return c;
}

std::vector<std::string> ProcessesNaming(const std::string& needle) {
  std::vector<std::string> out;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    int pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid) || pid == ::getpid()) continue;
    std::ifstream in(absl::StrCat("/proc/", e->d_name, "/cmdline"), std::ios::binary);
    std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (cmd.find(needle) == std::string::npos) continue;
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    out.push_back(absl::StrCat(pid, ": ", cmd.substr(0, 200)));
  }
  ::closedir(d);
  return out;
}

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(const std::string& name, std::vector<std::string> argv) {
  auto d = std::unique_ptr<Daemon>(new Daemon());
  d->name_ = name;
  SubprocessOptions o;
  o.argv = std::move(argv);
  Daemon* raw = d.get();
  o.on_line = [raw](absl::string_view line) {
    std::cerr << "[" << raw->name_ << "] " << line << "\n";
    absl::MutexLock lock(&raw->mu_);
    raw->lines_.emplace_back(line);
  };
  o.on_end = [raw] {
    absl::MutexLock lock(&raw->mu_);
    raw->output_ended_ = true;
  };
  absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(o);
  if (!p.ok()) return p.status();
  d->process_ = *std::move(p);
  return d;
}

Daemon::~Daemon() {
  if (process_ && process_->Running()) {
    process_->Signal(SIGKILL);
    (void)process_->Wait(absl::Seconds(10));
  }
  process_.reset();  // joins the reader before lines_ goes
}

absl::StatusOr<int> Daemon::Wait(absl::Duration timeout) {
  absl::StatusOr<int> status = process_->Wait(timeout);
  if (!status.ok()) return status;
  // Not an error if it never ends: a child the process left may hold the
  // output open (the test's own checks say whether one may).
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&output_ended_), absl::Seconds(10));
  return status;
}

size_t Daemon::lines() const {
  absl::MutexLock lock(&mu_);
  return lines_.size();
}

std::vector<std::string> Daemon::Lines(size_t from) const {
  absl::MutexLock lock(&mu_);
  if (from >= lines_.size()) return {};
  return std::vector<std::string>(lines_.begin() + from, lines_.end());
}

std::string Daemon::WaitForMatch(const std::string& pattern, absl::Duration timeout, size_t from) {
  std::regex re(pattern);
  absl::MutexLock lock(&mu_);
  size_t checked = from;
  std::string match;
  auto found = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (; checked < lines_.size(); ++checked) {
      if (std::regex_search(lines_[checked], re)) {
        match = lines_[checked];
        return true;
      }
    }
    return false;
  };
  mu_.AwaitWithTimeout(absl::Condition(&found), timeout);
  return match;
}

bool Daemon::WaitForLine(const std::string& text, absl::Duration timeout, size_t from) {
  absl::MutexLock lock(&mu_);
  size_t checked = from;
  auto found = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (; checked < lines_.size(); ++checked) {
      if (lines_[checked].find(text) != std::string::npos) return true;
    }
    return false;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&found), timeout);
}

namespace {

// The value of a "Name:   N kB" line of /proc/<pid>/status; -1 if none.
int64_t StatusKb(pid_t pid, const std::string& name) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name, 0) == 0) return std::atoll(line.c_str() + name.size());
  }
  return -1;
}

}  // namespace

int64_t RssKb(pid_t pid) { return StatusKb(pid, "VmRSS:"); }

int64_t PeakRssKb(pid_t pid) { return StatusKb(pid, "VmHWM:"); }

}  // namespace testing
}  // namespace psrt
