#include "tests/harness/chaos_run.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/checkpoint/checkpoint_manifest.h"
#include "common/plan/job_planner.h"
#include "google/protobuf/text_format.h"
#include "tests/harness/process_harness.h"
#include "tests/harness/tmpfs.h"

namespace psrt {
namespace testing {

namespace {

constexpr int kPs = 2;
constexpr int kWorkers = 2;
constexpr char kFakeTime[] = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
// How long one fault may take to settle (a restore, a takeover, training
// moving again) on a loaded 2-core machine before the run says it did not.
constexpr absl::Duration kSettleDeadline = absl::Minutes(3);
// A line that only a daemon that crashed or failed its own check prints.
constexpr char kCrashPattern[] =
    "Check failed|\\*\\*\\* SIG[A-Z]+|\\*\\*\\* Aborted|terminate called|AddressSanitizer|Segmentation fault";

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) out.push_back(e->d_name);
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

double JsonNumber(const std::string& json, const std::string& key) {
  std::smatch m;
  if (!std::regex_search(json, m, std::regex("\"" + key + "\": (-?[0-9.e+-]+)"))) return -1;
  double v = -1;
  return absl::SimpleAtod(m[1].str(), &v) ? v : -1;
}

}  // namespace

const char* FaultName(FaultKind kind) {
  switch (kind) {
    case FaultKind::kKillPs:
      return "kill-ps";
    case FaultKind::kKillWorker:
      return "kill-worker";
    case FaultKind::kKillChief:
      return "kill-chief";
    case FaultKind::kStop:
      return "stop";
    case FaultKind::kCorrupt:
      return "corrupt-old-snapshot";
    case FaultKind::kDiskFull:
      return "disk-full";
  }
  return "?";
}

std::string Fault::ToString() const {
  std::string s = absl::StrFormat("at %.3f of the steps: %s %s", at, FaultName(kind), target);
  switch (kind) {
    case FaultKind::kKillPs:
    case FaultKind::kKillWorker:
      absl::StrAppend(&s, ", restarted after ", absl::FormatDuration(delay));
      break;
    case FaultKind::kKillChief:
      absl::StrAppend(&s, ", restarted after ", absl::FormatDuration(delay),
                      clock_offset.empty() ? "" : absl::StrCat(" with its clock ", clock_offset));
      break;
    case FaultKind::kStop:
    case FaultKind::kDiskFull:
      absl::StrAppend(&s, " for ", absl::FormatDuration(hold));
      break;
    case FaultKind::kCorrupt:
      absl::StrAppend(&s, " (pick ", pick, ")");
      break;
  }
  return s;
}

std::vector<Fault> DrawSchedule(uint64_t seed, int n, bool disk_faults, bool clock_faults) {
  // One generator, draws in a fixed order: the same seed, the same schedule
  // on every machine (std::mt19937_64's sequence is fixed by the standard;
  // the distributions are not, so none is used).
  std::mt19937_64 rng(seed);
  auto uniform = [&rng](double lo, double hi) {
    return lo + (hi - lo) * static_cast<double>(rng() >> 11) / static_cast<double>(1ull << 53);
  };
  auto below = [&rng](uint64_t n) { return static_cast<int>(rng() % n); };
  // Weights: kills and stops are what a cluster meets most.
  std::vector<std::pair<FaultKind, int>> kinds = {{FaultKind::kKillPs, 3}, {FaultKind::kKillWorker, 2},
                                                  {FaultKind::kKillChief, 2}, {FaultKind::kStop, 3},
                                                  {FaultKind::kCorrupt, 1}};
  if (disk_faults) kinds.push_back({FaultKind::kDiskFull, 1});
  int total = 0;
  for (const auto& k : kinds) total += k.second;
  const std::vector<std::string> offsets = {"-1h", "+1h", "-10m", "+10m"};
  std::vector<Fault> out;
  for (int i = 0; i < n; ++i) {
    Fault f;
    // From after the first checkpoints to well before the end, so that the
    // job has steps left to show it recovered.
    f.at = uniform(0.04, 0.85);
    int r = below(total);
    for (const auto& k : kinds) {
      if (r < k.second) {
        f.kind = k.first;
        break;
      }
      r -= k.second;
    }
    f.delay = absl::Milliseconds(static_cast<int64_t>(uniform(0, 2000)));
    f.hold = absl::Milliseconds(static_cast<int64_t>(uniform(200, 15000)));
    f.pick = static_cast<uint32_t>(rng());
    const int task = below(kPs + kWorkers + 1);
    const std::string offset = offsets[below(offsets.size())];
    const bool off_clock = below(2) == 0;
    switch (f.kind) {
      case FaultKind::kKillPs:
        f.target = absl::StrCat("ps:", task % kPs);
        break;
      case FaultKind::kKillWorker:
        f.target = absl::StrCat("worker:", task % kWorkers);
        break;
      case FaultKind::kKillChief:
        f.target = "chief:0";
        if (clock_faults && off_clock) f.clock_offset = offset;
        break;
      case FaultKind::kStop:
        f.target = task < kPs ? absl::StrCat("ps:", task)
                              : task < kPs + kWorkers ? absl::StrCat("worker:", task - kPs) : "chief:0";
        break;
      case FaultKind::kCorrupt:
        break;
      case FaultKind::kDiskFull:
        f.target = "ps:1";  // the PS whose store is on the small tmpfs
        f.hold = absl::Milliseconds(static_cast<int64_t>(uniform(1000, 10000)));
        break;
    }
    out.push_back(f);
  }
  std::stable_sort(out.begin(), out.end(), [](const Fault& a, const Fault& b) { return a.at < b.at; });
  return out;
}

std::string ChaosReport::ToString() const {
  std::vector<std::string> kinds, settles;
  for (const auto& [k, v] : injected) kinds.push_back(absl::StrCat(k, " ", v));
  for (double s : settle_seconds) settles.push_back(absl::StrFormat("%.1f", s));
  return absl::StrCat(
      "CHAOS seed ", seed, ": ", violations.empty() ? "every invariant held" : "INVARIANTS VIOLATED", "\n",
      "  faults injected:     ", absl::StrJoin(kinds, ", "), skipped.empty() ? "" : absl::StrCat(" (", skipped.size(), " skipped)"),
      "\n", "  settled in (s):      ", absl::StrJoin(settles, " "), "\n",
      "  failures_survived:   ", failures_survived, " (expected ", expected_failures, "; recoveries logged ",
      recoveries_logged, ")\n", "  rolled_back_steps:   ", rolled_back_steps, " (restores and takeovers logged ", rolled_back_logged,
      ")\n", "  steps:               ", steps, " of ", total_steps, ", accuracy ", accuracy, "\n",
      "  checkpoints kept:    ", checkpoints_kept, " (", checkpoints_ok, " verify, ", checkpoints_damaged,
      " damaged by the run)\n", "  wall:                ", absl::FormatDuration(absl::Trunc(wall, absl::Seconds(1))),
      " (last fault -> job done ", absl::FormatDuration(absl::Trunc(last_fault_to_end, absl::Milliseconds(100))), ")\n",
      skipped.empty() ? "" : absl::StrCat("  skipped: ", absl::StrJoin(skipped, "; "), "\n"),
      violations.empty() ? "" : absl::StrCat("  VIOLATION: ", absl::StrJoin(violations, "\n  VIOLATION: "), "\n"));
}

namespace {

// One run: the cluster, the supervisor and the fault injector, all driven
// from the calling thread (Tick() between every wait).
class ChaosRun {
 public:
  ChaosRun(const ChaosOptions& o) : o_(o) { report_.seed = o.seed; }

  ChaosReport Run() {
    const absl::Time start = absl::Now();
    const bool disk = o_.disk_faults && PrepareDisk();
    report_.schedule = o_.schedule.empty() ? DrawSchedule(o_.seed, o_.faults, disk, o_.clock_faults && Clock())
                                           : o_.schedule;
    std::cerr << "CHAOS seed " << o_.seed << " in " << o_.dir << ", schedule:\n";
    for (const Fault& f : report_.schedule) std::cerr << "  " << f.ToString() << "\n";
    if (!Setup()) return Finish(start);
    for (const Fault& f : report_.schedule) {
      if (!WaitForFraction(f.at)) {
        report_.skipped.push_back(absl::StrCat(f.ToString(), ": the job ended first"));
        continue;
      }
      Inject(f);
    }
    const absl::Time last = absl::Now();
    if (!Until([this] { return chief_done_; }, o_.finish_deadline)) {
      Violation(absl::StrCat("the job did not finish within ", absl::FormatDuration(o_.finish_deadline),
                             " of the last fault (last step seen ", last_step_, "/", end_step_, ")"));
    }
    report_.last_fault_to_end = absl::Now() - last;
    Check();
    return Finish(start);
  }

 private:
  struct Task {
    std::string name;    // "ps:0"
    std::string binary;  // "ps/server"
    std::unique_ptr<Daemon> d;
    std::optional<absl::Time> restart_at;
    std::string clock_offset;  // for its next start
    bool finished = false;     // exited 0 at the end of the job
  };

  void Violation(const std::string& what) {
    std::cerr << "CHAOS VIOLATION (seed " << o_.seed << "): " << what << "\n";
    report_.violations.push_back(what);
  }

  ChaosReport Finish(absl::Time start) {
    // Nothing of the run outlives it, whatever failed.
    for (Task& t : tasks_) {
      if (t.d != nullptr) {
        t.d->Kill(SIGCONT);
        graveyard_.push_back(std::move(t.d));
      }
    }
    graveyard_.clear();
    disk_.reset();
    report_.wall = absl::Now() - start;
    return report_;
  }

  static bool Clock() {
    if (FileExists(kFakeTime)) return true;
    std::cerr << "CHAOS: no " << kFakeTime << " (deploy/setup.sh installs faketime): no chief clock offsets\n";
    return false;
  }

  // ps:1's snapshot store on a 64 MiB tmpfs, for the disk-full faults.
  bool PrepareDisk() {
    disk_ = Tmpfs::Mount(o_.dir + "/ckpt/ps-1", "64m");
    if (disk_ == nullptr) std::cerr << "CHAOS: cannot mount a tmpfs (needs root): no disk-full faults\n";
    return disk_ != nullptr;
  }

  bool Setup() {
    auto c = MakeTestCluster(kPs, kWorkers, absl::StrCat("chaos-", ::getpid(), "-", o_.seed));
    if (!c.ok()) {
      Violation(absl::StrCat("cluster spec: ", c.status().ToString()));
      return false;
    }
    cluster_ = *c;
    auto job = LoadJob(RunfilePath("examples/fashion_mnist_mlp.pbtxt"));
    if (!job.ok()) {
      Violation(absl::StrCat("job: ", job.status().ToString()));
      return false;
    }
    job->set_epochs(o_.epochs);
    job->mutable_checkpoint()->set_dir(o_.dir + "/ckpt");
    job->mutable_checkpoint()->set_every_steps(o_.checkpoint_every_steps);
    job->mutable_eval()->set_every_steps(0);
    job->mutable_eval()->set_max_examples(0);  // all 10,000: the bar needs the precision
    job->set_summary_path(o_.dir + "/summary.json");
    job->clear_log_dir();
    std::string text;
    google::protobuf::TextFormat::PrintToString(*job, &text);
    job_path_ = o_.dir + "/job.pbtxt";
    std::ofstream(job_path_) << text;
    for (int p = 0; p < kPs; ++p) tasks_.push_back({absl::StrCat("ps:", p), "ps/server"});
    for (int w = 0; w < kWorkers; ++w) tasks_.push_back({absl::StrCat("worker:", w), "worker/main"});
    tasks_.push_back({"chief:0", "chief/main"});  // last: it waits for the others anyway
    for (Task& t : tasks_) {
      if (!Start(&t)) return false;
    }
    return true;
  }

  Task* Find(const std::string& name) {
    for (Task& t : tasks_) {
      if (t.name == name) return &t;
    }
    return nullptr;
  }

  bool Start(Task* t) {
    std::vector<std::string> argv;
    if (!t->clock_offset.empty()) {
      argv = {"/usr/bin/env", absl::StrCat("LD_PRELOAD=", kFakeTime), "FAKETIME=" + t->clock_offset,
              "FAKETIME_DONT_FAKE_MONOTONIC=1"};
    }
    argv.push_back(RunfilePath(t->binary));
    argv.push_back("--cluster_spec=" + cluster_.spec_path);
    argv.push_back("--task=" + t->name);
    if (absl::StartsWith(t->name, "ps:")) {
      argv.push_back("--snapshot_dir=" + o_.dir);  // its store: DIR/ckpt/ps-N, beside the manifests
    } else {
      argv.push_back("--threads=1");  // 2 workers and a chief on a shared 2-core machine
    }
    if (t->name == "chief:0") argv.push_back("--job=" + job_path_);
    auto d = Daemon::Start(t->name, argv);
    t->restart_at.reset();
    t->clock_offset.clear();
    if (!d.ok()) {
      Violation(absl::StrCat("starting ", t->name, ": ", d.status().ToString()));
      return false;
    }
    t->d = *std::move(d);
    if (t->name == "chief:0") chiefs_.push_back(t->d.get());
    return true;
  }

  // The supervisor's round: restarts what is due, notes what exited, sends
  // a SIGCONT that is due, reads the chief's progress.
  void Tick() {
    const absl::Time now = absl::Now();
    if (cont_at_.has_value() && now >= *cont_at_) {
      if (Task* t = Find(stopped_); t != nullptr && t->d != nullptr) t->d->Kill(SIGCONT);
      cont_at_.reset();
    }
    for (Task& t : tasks_) {
      if (t.d == nullptr) {
        // Once the chief is done nothing is restarted, as the launcher
        // stops supervising then: a worker started after the job ended
        // would wait for a chief for good.
        if (t.restart_at.has_value() && now >= *t.restart_at && !chief_done_) Start(&t);
        continue;
      }
      std::optional<int> st = t.d->process()->Poll();
      if (!st.has_value()) continue;
      const bool clean = WIFEXITED(*st) && WEXITSTATUS(*st) == 0;
      if (clean && t.name == "chief:0") {
        chief_done_ = true;
        t.finished = true;
      } else if (clean && absl::StartsWith(t.name, "worker:")) {
        t.finished = true;  // the chief shut it down at the end of the job
      } else {
        // Only the run's own SIGKILLs end a daemon (they are reaped where
        // they are sent); anything else is a crash, restarted as a
        // supervisor would.
        Violation(absl::StrCat(t.name, " died on its own: ", DescribeWaitStatus(*st)));
        t.restart_at = now + absl::Seconds(1);
      }
      graveyard_.push_back(std::move(t.d));
    }
    ReadProgress();
  }

  // The chief's "step N/END" lines, newest last.
  void ReadProgress() {
    if (chiefs_.empty()) return;
    Daemon* chief = chiefs_.back();
    if (chief != progress_of_) {
      progress_of_ = chief;
      progress_from_ = 0;
    }
    static const std::regex re("step ([0-9]+)/([0-9]+) ");
    for (const std::string& line : chief->Lines(progress_from_)) {
      ++progress_from_;
      std::smatch m;
      if (!std::regex_search(line, m, re)) continue;
      last_step_ = std::stoll(m[1]);
      end_step_ = std::stoll(m[2]);
    }
  }

  // Ticks until `cond` holds (true) or `timeout` passes (false). Polls:
  // what it waits for is in other processes.
  bool Until(const std::function<bool()>& cond, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (true) {
      Tick();
      if (cond()) return true;
      if (absl::Now() >= deadline) return false;
      absl::SleepFor(absl::Milliseconds(25));
    }
  }

  // Where the chief's log is now: lines after it are the fault's.
  struct Cursor {
    size_t chief = 0;  // index into chiefs_
    size_t line = 0;
  };
  Cursor Now() {
    return chiefs_.empty() ? Cursor{} : Cursor{chiefs_.size() - 1, chiefs_.back()->lines()};
  }
  // True once a line of this or a later chief after `from` matches.
  bool ChiefSaid(const Cursor& from, const std::regex& re, Cursor* at = nullptr) {
    for (size_t c = from.chief; c < chiefs_.size(); ++c) {
      size_t n = c == from.chief ? from.line : 0;
      for (const std::string& line : chiefs_[c]->Lines(n)) {
        ++n;
        if (std::regex_search(line, re)) {
          if (at != nullptr) *at = Cursor{c, n};
          return true;
        }
      }
    }
    return false;
  }

  bool WaitForFraction(double at) {
    bool ok = Until([&] { return chief_done_ || (end_step_ > 0 && last_step_ >= at * end_step_); }, absl::Minutes(10));
    if (!ok) Violation(absl::StrCat("no progress to ", at, " of the steps within 10 minutes (at ", last_step_, ")"));
    // Training over (faults before took that long): the chief is at its
    // final checkpoint and shutdown, which are not what is under test.
    return ok && !chief_done_ && last_step_ < end_step_;
  }

  // Training moves again: two progress lines after `from` with rising steps.
  bool Moving(const Cursor& from, const std::string& what) {
    const absl::Time t0 = absl::Now();
    Cursor c = from;
    int64_t first = -1;
    static const std::regex re("step ([0-9]+)/");
    bool ok = Until(
        [&] {
          if (chief_done_) return true;
          Cursor at;
          while (ChiefSaid(c, re, &at)) {
            std::smatch m;
            std::string line = chiefs_[at.chief]->Lines(at.line - 1)[0];
            std::regex_search(line, m, re);
            const int64_t step = std::stoll(m[1]);
            if (first >= 0 && step > first) return true;
            if (first < 0) first = step;
            c = at;
          }
          return false;
        },
        kSettleDeadline);
    if (!ok) Violation(absl::StrCat("training did not move again within ", absl::FormatDuration(kSettleDeadline),
                                    " after ", what));
    report_.settle_seconds.push_back(absl::ToDoubleSeconds(absl::Now() - t0));
    return ok;
  }

  bool Settled(const Cursor& from, const std::string& pattern, const std::string& what) {
    const std::regex re(pattern);
    const absl::Time t0 = absl::Now();
    bool ok = Until([&] { return chief_done_ || ChiefSaid(from, re); }, kSettleDeadline);
    if (!ok) {
      Violation(absl::StrCat("after ", what, " the chief did not say /", pattern, "/ within ",
                             absl::FormatDuration(kSettleDeadline)));
    }
    report_.settle_seconds.push_back(absl::ToDoubleSeconds(absl::Now() - t0));
    return ok;
  }

  // SIGKILL, reaped here (a kill that is not ours is a crash), restart due
  // after `f.delay`.
  bool Kill(const Fault& f) {
    Task* t = Find(f.target);
    if (t == nullptr || t->d == nullptr || !t->d->process()->Running()) {
      report_.skipped.push_back(absl::StrCat(f.ToString(), ": not running"));
      return false;
    }
    t->d->Kill(SIGKILL);
    absl::StatusOr<int> st = t->d->Wait(absl::Seconds(30));
    if (!st.ok() || !WIFSIGNALED(*st) || WTERMSIG(*st) != SIGKILL) {
      Violation(absl::StrCat(f.target, " did not die of SIGKILL: ",
                             st.ok() ? DescribeWaitStatus(*st) : st.status().ToString()));
    }
    graveyard_.push_back(std::move(t->d));
    t->restart_at = absl::Now() + f.delay;
    t->clock_offset = f.clock_offset;
    return true;
  }

  void Inject(const Fault& f) {
    std::cerr << "CHAOS inject at step " << last_step_ << "/" << end_step_ << ": " << f.ToString() << "\n";
    const Cursor before = Now();
    switch (f.kind) {
      case FaultKind::kKillPs:
        if (!Kill(f)) return;
        ++report_.expected_failures;  // a restarted PS holds nothing: a restore
        Settled(before, "recovered to the checkpoint of step", f.ToString());
        break;
      case FaultKind::kKillWorker: {
        if (!Kill(f)) return;
        // Not a failure of the job: the worker's pushes stand and it is
        // started again at its step (or its data dealt to the other
        // worker if it stays away past the heartbeat timeout).
        Settled(before, absl::StrCat(f.target, " (\\(re\\)started|answers again)"), f.ToString());
        break;
      }
      case FaultKind::kKillChief: {
        if (!Kill(f)) return;
        ++report_.expected_failures;  // the next chief takes over from the job state
        if (Settled(before, "did not finish: taking over", f.ToString())) Moving(Now(), f.ToString());
        break;
      }
      case FaultKind::kStop: {
        Task* t = Find(f.target);
        if (t == nullptr || t->d == nullptr || !t->d->process()->Running()) {
          report_.skipped.push_back(absl::StrCat(f.ToString(), ": not running"));
          return;
        }
        t->d->Kill(SIGSTOP);
        stopped_ = f.target;
        cont_at_ = absl::Now() + f.hold;
        Until([this] { return !cont_at_.has_value(); }, f.hold + absl::Minutes(1));
        Moving(Now(), f.ToString());
        break;
      }
      case FaultKind::kCorrupt:
        if (!Corrupt(f)) return;
        break;
      case FaultKind::kDiskFull:
        if (!FillDisk(f)) return;
        Moving(Now(), f.ToString());
        break;
    }
    ++report_.injected[FaultName(f.kind)];
  }

  // Flips a byte in the middle of one data file of a committed checkpoint
  // that is not the newest: the newest stays restorable, so the job must
  // never need the damaged one (and retention must not lean on it alone).
  bool Corrupt(const Fault& f) {
    ManifestStore manifests(o_.dir + "/ckpt");
    std::vector<int64_t> steps = manifests.Steps();
    if (steps.size() < 2) {
      report_.skipped.push_back(absl::StrCat(f.ToString(), ": fewer than two committed checkpoints"));
      return false;
    }
    steps.pop_back();
    const int64_t step = steps[f.pick % steps.size()];
    absl::StatusOr<CheckpointManifest> m = manifests.Read(step);
    if (!m.ok() || m->shard_size() == 0) {
      report_.skipped.push_back(absl::StrCat(f.ToString(), ": manifest of step ", step, " unreadable"));
      return false;
    }
    const std::string store = o_.dir + "/ckpt/" + m->shard((f.pick / 7) % m->shard_size()).path();
    const std::string prefix = absl::StrFormat("snapshot-%020d-", step);
    std::string file;
    for (const std::string& name : ListDir(store)) {
      if (absl::StartsWith(name, prefix) && absl::EndsWith(name, ".data")) file = store + "/" + name;
    }
    std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(0, std::ios::end);
    const int64_t size = file.empty() ? 0 : static_cast<int64_t>(io.tellg());
    if (size < 64) {
      report_.skipped.push_back(absl::StrCat(f.ToString(), ": no data file of step ", step, " in ", store,
                                             " (pruned meanwhile)"));
      return false;
    }
    const int64_t at = size / 4 + (f.pick % (size / 2));
    char byte = 0;
    io.seekg(at);
    io.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x5a);
    io.seekp(at);
    io.write(&byte, 1);
    io.flush();
    corrupted_.insert(step);
    std::cerr << "CHAOS corrupted byte " << at << " of " << file << " (checkpoint of step " << step << ")\n";
    // The damage is seen (unless retention pruned the checkpoint meanwhile).
    // Only this step is judged: while the job runs, a checkpoint being
    // pruned may read as damaged.
    const std::map<int64_t, std::string> seen = Verify();
    if (auto it = seen.find(step); it != seen.end() && it->second == " ok") {
      Violation(absl::StrCat("checkpoints --verify finds no damage in the checkpoint of step ", step, " after byte ",
                             at, " of ", file, " was flipped"));
    }
    return true;
  }

  // Fills ps:1's tmpfs until a write fails, holds, frees it.
  bool FillDisk(const Fault& f) {
    if (disk_ == nullptr) {
      report_.skipped.push_back(absl::StrCat(f.ToString(), ": no tmpfs"));
      return false;
    }
    const std::string filler = disk_->dir() + "/chaos-filler";
    {
      std::ofstream out(filler, std::ios::binary);
      std::string block(1 << 20, 'x');
      while (out.write(block.data(), block.size())) {
      }
    }
    Until([] { return false; }, f.hold);  // the supervisor goes on meanwhile
    std::remove(filler.c_str());
    return true;
  }

  // The invariants, once the job is over.
  void Check() {
    // The daemons end: the workers by themselves (the chief shut them
    // down), the PS cleanly on SIGTERM, as the launcher stops them.
    if (chief_done_) {
      const bool workers_gone = Until(
          [this] {
            for (Task& t : tasks_) {
              // Exited (Tick reaps it) or killed and, the job over, not restarted.
              if (absl::StartsWith(t.name, "worker:") && t.d != nullptr) return false;
            }
            return true;
          },
          absl::Minutes(1));
      if (!workers_gone) Violation("a worker was still running a minute after the job ended");
    }
    for (Task& t : tasks_) {
      if (!absl::StartsWith(t.name, "ps:") || t.d == nullptr) continue;
      t.d->Kill(SIGTERM);
      absl::StatusOr<int> st = t.d->Wait(absl::Seconds(60));
      if (!st.ok() || !WIFEXITED(*st) || WEXITSTATUS(*st) != 0) {
        Violation(absl::StrCat(t.name, " did not exit 0 on SIGTERM: ",
                               st.ok() ? DescribeWaitStatus(*st) : st.status().ToString()));
      }
      graveyard_.push_back(std::move(t.d));
    }
    for (Task& t : tasks_) {
      if (t.d != nullptr) {
        if (chief_done_) Violation(absl::StrCat(t.name, " still runs after the job ended"));
        t.d->Kill(SIGKILL);
        (void)t.d->Wait(absl::Seconds(30));
        graveyard_.push_back(std::move(t.d));
      }
    }
    std::vector<std::string> left = ProcessesNaming(cluster_.spec_path);
    if (!left.empty()) Violation(absl::StrCat("processes of the job left: ", absl::StrJoin(left, "; ")));


    // The counters: every chief's own words against the summary.
    static const std::regex recovering("recovering: |did not finish: taking over");
    static const std::regex rolled("rolled_back_steps=([0-9]+)");
    // The chief says each report twice: on stdout, and in its glog lines.
    static const std::regex glog("^[IWEF][0-9]{8} ");
    for (Daemon* c : chiefs_) {
      for (const std::string& line : c->Lines()) {
        std::smatch m;
        if (std::regex_search(line, glog)) continue;
        if (std::regex_search(line, recovering)) ++report_.recoveries_logged;
        if ((absl::StrContains(line, "recovered to the checkpoint") || absl::StrContains(line, "took over at the checkpoint")) &&
            std::regex_search(line, m, rolled)) {
          report_.rolled_back_logged += std::stoll(m[1]);
        }
      }
    }
    std::ifstream in(o_.dir + "/summary.json");
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string summary = ss.str();
    report_.failures_survived = JsonNumber(summary, "failures_survived");
    report_.rolled_back_steps = JsonNumber(summary, "rolled_back_steps");
    report_.accuracy = JsonNumber(summary, "accuracy");
    report_.steps = JsonNumber(summary, "steps");
    report_.total_steps = JsonNumber(summary, "total_steps");
    if (chief_done_) {
      if (summary.empty()) Violation("no summary.json");
      if (report_.failures_survived != report_.expected_failures) {
        Violation(absl::StrCat("failures_survived ", report_.failures_survived, ", but the run killed ",
                               report_.expected_failures, " PS or chiefs"));
      }
      if (report_.recoveries_logged != report_.expected_failures) {
        Violation(absl::StrCat("the chiefs logged ", report_.recoveries_logged, " recoveries and takeovers for ",
                               report_.expected_failures, " PS or chief kills"));
      }
      // What every chief's restores and takeovers said they rolled back,
      // whichever chief wrote the summary.
      if (report_.rolled_back_steps != report_.rolled_back_logged) {
        Violation(absl::StrCat("rolled_back_steps ", report_.rolled_back_steps, ", but the chiefs' restores and takeovers said ",
                               report_.rolled_back_logged));
      }
      if (report_.expected_failures == 0 && report_.rolled_back_steps != 0) {
        Violation(absl::StrCat("rolled_back_steps ", report_.rolled_back_steps, " with no restore"));
      }
      if (report_.steps != report_.total_steps || report_.steps <= 0) {
        Violation(absl::StrCat("trained ", report_.steps, " of ", report_.total_steps, " steps"));
      }
      if (!(report_.accuracy >= o_.accuracy_bar)) {
        Violation(absl::StrCat("accuracy ", report_.accuracy, " below the bar ", o_.accuracy_bar));
      }
    }
    VerifyCheckpoints();

    // No daemon crashed or failed a check, in any incarnation. Last: the
    // final lines of the PS stopped above have had the verification's
    // seconds to come through their pipes.
    const std::regex crash(kCrashPattern);
    for (const auto& d : graveyard_) {
      for (const std::string& line : d->Lines()) {
        if (std::regex_search(line, crash)) Violation(absl::StrCat("a daemon logged: ", line));
      }
    }
  }

  // `checkpoints DIR --verify`: each kept checkpoint's step -> " ok", or
  // what is wrong with it. Empty (and a violation) if the tool fails.
  std::map<int64_t, std::string> Verify() {
    std::map<int64_t, std::string> out;
    auto v = Daemon::Start("checkpoints", {RunfilePath("chief/checkpoints"), o_.dir + "/ckpt", "--verify"});
    if (!v.ok()) {
      Violation(absl::StrCat("checkpoints --verify: ", v.status().ToString()));
      return out;
    }
    // Its last line, not its exit: the lines of a process that has exited
    // may still be on their way from its pipe.
    const bool said = Until(
        [&] { return !(*v)->WaitForMatch("of [0-9]+ checkpoints damaged|^error: ", absl::ZeroDuration()).empty(); },
        absl::Minutes(3));
    absl::StatusOr<int> st = (*v)->Wait(absl::Seconds(30));
    if (!said || !st.ok() || !WIFEXITED(*st) || WEXITSTATUS(*st) > 1) {
      Violation(absl::StrCat("checkpoints --verify did not finish: ",
                             st.ok() ? DescribeWaitStatus(*st) : st.status().ToString()));
      return out;
    }
    static const std::regex row("^([0-9]+) .*( ok| DAMAGED: .*|CORRUPT: .*)$");
    for (const std::string& line : (*v)->Lines()) {
      std::smatch m;
      if (std::regex_match(line, m, row)) out[std::stoll(m[1])] = m[2];
    }
    return out;
  }

  // Every kept checkpoint reads whole but those the run damaged, and at
  // least one does.
  void VerifyCheckpoints() {
    for (const auto& [step, what] : Verify()) {
      ++report_.checkpoints_kept;
      if (what == " ok") {
        ++report_.checkpoints_ok;
      } else if (corrupted_.count(step) > 0) {
        ++report_.checkpoints_damaged;
      } else {
        Violation(absl::StrCat("kept checkpoint of step ", step, " does not verify and the run did not damage it:",
                               what));
      }
    }
    if (report_.checkpoints_ok == 0) Violation("no kept checkpoint verifies: nothing left to restore");
  }

  const ChaosOptions o_;
  ChaosReport report_;
  TestCluster cluster_;
  std::string job_path_;
  std::unique_ptr<Tmpfs> disk_;
  std::vector<Task> tasks_;
  std::vector<std::unique_ptr<Daemon>> graveyard_;  // dead incarnations: their logs are checked at the end
  std::vector<Daemon*> chiefs_;                     // every chief incarnation, in order (not owned)
  Daemon* progress_of_ = nullptr;
  size_t progress_from_ = 0;
  int64_t last_step_ = -1, end_step_ = -1;
  bool chief_done_ = false;
  std::string stopped_;
  std::optional<absl::Time> cont_at_;
  std::set<int64_t> corrupted_;  // checkpoints whose data the run damaged
};

}  // namespace

ChaosReport RunChaos(const ChaosOptions& options) {
  if (std::system(absl::StrCat("mkdir -p '", options.dir, "'").c_str()) != 0) {
    ChaosReport r;
    r.seed = options.seed;
    r.violations.push_back("cannot create " + options.dir);
    return r;
  }
  return ChaosRun(options).Run();
}

}  // namespace testing
}  // namespace psrt
