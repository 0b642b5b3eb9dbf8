// The local launcher: a whole cluster on this machine, as separate processes.
//
//   bazel run //deploy:local_cluster -- [--job=FILE] [--cluster_spec=FILE]
//       [--ps=2] [--workers=2] [--kill=ps:1@800] [--remove=worker:1@3000] [--run_dir=DIR]
//       [--scale=worker:3@1500,worker:1@3000,ps:3@3000]
//       [--strategy=parameter_server|multi_worker_mirrored|mirrored|central_storage|hybrid]
//       [--evaluator]
//
// Starts the parameter servers, the workers and the chief, supervises them
// as Kubernetes would (a daemon that dies is restarted with backoff, up to
// --max_restarts), shows the chief's progress, writes every daemon's log to
// RUN_DIR/cluster.log, and at the end prints the test accuracy and where the
// checkpoints and summary are. Ctrl-C stops everything; no child outlives
// the launcher (they die with it).
//
// With --evaluator (or a spec with an `evaluator` task) it also starts the
// evaluator (//worker:evaluator), which follows the committed checkpoints
// and writes its metrics to RUN_DIR/logs/evaluator and its /metrics; at the
// end the launcher gives it time to evaluate the final checkpoint.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <regex>
#include <tuple>
#include <sstream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/flags_help.h"
#include "common/transport/chief_client.h"
#include "common/cluster_spec.h"
#include "common/exit_codes.h"
#include "common/rpc/channel_cache.h"
#include "common/subprocess.h"
#include "google/protobuf/text_format.h"
#include "proto/job.pb.h"

ABSL_FLAG(std::string, job, "", "Training job (default: examples/fashion_mnist_mlp.pbtxt).");
ABSL_FLAG(std::string, cluster_spec, "", "Cluster spec (default: a chief, --ps PS and --workers workers on free loopback ports).");
ABSL_FLAG(std::string, strategy, "",
          "parameter_server, multi_worker_mirrored, mirrored, central_storage or hybrid: picks the "
          "default job (examples/fashion_mnist_mlp.pbtxt, _mirrored, _devices, _central_storage; "
          "examples/sparse_libsvm_hybrid.pbtxt, whose data make_sparse_data.py makes) and, without "
          "--cluster_spec, the cluster's shape (mirrored strategies have no ps tasks; mirrored and "
          "central_storage one worker). Default: the --job's own strategy, else parameter_server.");
ABSL_FLAG(int, ps, 2, "Parameter servers, without --cluster_spec (none with --strategy=multi_worker_mirrored).");
ABSL_FLAG(int, workers, 2, "Workers, without --cluster_spec.");
ABSL_FLAG(std::vector<std::string>, kill, {},
          "TASK@STEP[,...]: SIGKILL that daemon once the job reaches the step (e.g. ps:1@800), to watch recovery.");
ABSL_FLAG(std::vector<std::string>, remove, {},
          "TASK@STEP[,...]: SIGKILL that daemon once the job reaches the step and never restart it (a machine "
          "gone for good), to watch a collective group shrink.");
ABSL_FLAG(std::vector<std::string>, ps_flags, {},
          "Extra flags for every parameter server, comma-separated (e.g. --ps_flags=--apply_threads=1).");
ABSL_FLAG(std::vector<std::string>, worker_flags, {},
          "Extra flags for every worker, comma-separated (e.g. --worker_flags=--overlap_push=true).");
ABSL_FLAG(std::vector<std::string>, scale, {},
          "worker:N@STEP[,...]: once the job reaches STEP, grow or shrink the running workers to N, as an "
          "orchestrator scaling a StatefulSet would: new workers (beyond the spec: worker:2, worker:3, ...) are "
          "started and join the running job; workers above N are stopped with SIGTERM and leave it for good. "
          "The job must allow it: failure.max_workers >= the largest N (parameter-server strategy). "
          "ps:N@STEP does the same with parameter servers: a new PS (ps:2, ...) joins and takes its share "
          "of the variables; a PS above N is stopped with SIGTERM and leaves once its variables moved off "
          "(failure.max_ps >= the largest N; ASYNC, no replication).");
ABSL_FLAG(std::string, run_dir, "", "Where logs, checkpoints and the summary go (default: /tmp/psrt-run-TIME).");
ABSL_FLAG(int, max_restarts, 5, "Give up after restarting one daemon this many times.");
ABSL_FLAG(bool, tls, false,
          "Run every daemon with mutual TLS: make a CA and per-task certificates under "
          "RUN_DIR/certs (deploy/make_certs.sh) and pass them.");
ABSL_FLAG(bool, role_tokens, false,
          "Run every daemon with per-role tokens, each task holding its own (RUN_DIR/certs/tokens/JOB-N, "
          "deploy/make_certs.sh): each role's calls are limited to what that role may do, and a task's token "
          "speaks for that task only. With --tls too, both are checked.");
ABSL_FLAG(bool, evaluator, false,
          "Also start an evaluator task (//worker:evaluator): it evaluates each committed checkpoint on the "
          "test split and writes TensorBoard scalars to RUN_DIR/logs/evaluator and Prometheus /metrics.");
ABSL_FLAG(int, evaluator_wait_s, 120,
          "When the chief is done, wait this long for the evaluator to evaluate the final checkpoint.");
ABSL_FLAG(bool, verbose, false, "Show every daemon's log lines, not only warnings and the chief's progress.");

namespace psrt {
namespace {

std::atomic<bool> g_interrupted{false};

std::string Here(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  const char* wd = std::getenv("BUILD_WORKING_DIRECTORY");
  return wd ? absl::StrCat(wd, "/", path) : path;
}

// Where the daemons' binaries are: the runfiles of `bazel run`, or beside
// bazel-bin when run directly.
std::string Binary(const std::string& argv0, const std::string& rel) {
  for (const std::string& base : {std::string("."), argv0 + ".runfiles/psrt",
                                  std::string(std::getenv("RUNFILES_DIR") ? std::getenv("RUNFILES_DIR") : "") + "/psrt"}) {
    std::string p = base + "/" + rel;
    if (access(p.c_str(), F_OK) == 0) return p;
  }
  return rel;
}

struct Child {
  TaskId task;
  std::vector<std::string> argv;
  std::unique_ptr<Subprocess> process;
  int restarts = 0;
  absl::Time restart_at = absl::InfinitePast();
  bool finished = false;  // exited 0 at the end of the job, or removed (--remove)
};

class Launcher {
 public:
  Launcher(std::string run_dir, bool verbose) : run_dir_(std::move(run_dir)), verbose_(verbose) {
    log_.open(run_dir_ + "/cluster.log");
  }

  void Line(const std::string& who, absl::string_view line, bool chief) {
    absl::MutexLock lock(&mu_);
    log_ << "[" << who << "] " << line << "\n";
    log_.flush();
    bool glog = line.size() > 1 && std::string("IWEF").find(line[0]) != std::string::npos && isdigit(line[1]);
    bool loud = glog && (line[0] == 'W' || line[0] == 'E' || line[0] == 'F');
    if (chief && !glog) {
      std::cout << line << std::endl;
    } else if (verbose_ || loud || (!glog && !chief)) {
      std::cout << "[" << who << "] " << line << std::endl;
    }
  }
  void Say(const std::string& what) { Line("launcher", what, false); }

  absl::Status Start(Child* c) {
    SubprocessOptions o;
    o.argv = c->argv;
    std::string who = TaskName(c->task);
    bool chief = c->task.job() == kChiefJob;
    o.on_line = [this, who, chief](absl::string_view l) { Line(who, l, chief); };
    absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(o);
    if (!p.ok()) return p.status();
    c->process = *std::move(p);
    return absl::OkStatus();
  }

 private:
  const std::string run_dir_;
  const bool verbose_;
  absl::Mutex mu_;
  std::ofstream log_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::string> DefaultSpec(const std::string& run_dir, int ps, int workers, bool evaluator) {
  auto addr = []() -> absl::StatusOr<std::string> {
    absl::StatusOr<int> p = PickFreePort();
    if (!p.ok()) return p.status();
    return absl::StrCat("\"127.0.0.1:", *p, "\"");
  };
  std::vector<std::string> p, w;
  auto chief = addr();
  if (!chief.ok()) return chief.status();
  for (int i = 0; i < ps; ++i) p.push_back(*addr());
  for (int i = 0; i < workers; ++i) w.push_back(*addr());
  std::string path = run_dir + "/cluster.json";
  std::ofstream out(path);
  out << "{\"chief\": [" << *chief << "], ";
  if (!p.empty()) out << "\"ps\": [" << absl::StrJoin(p, ", ") << "], ";
  out << "\"worker\": [" << absl::StrJoin(w, ", ") << "]";
  // TensorFlow's evaluator task; it listens on no port of the spec (its
  // /metrics port is a flag), but TF_CONFIG names one per task.
  if (evaluator) out << ", \"evaluator\": [" << *addr() << "]";
  out << "}\n";
  return path;
}

// --scale: tasks 0..n-1 of `job` (worker or ps) run, the others not. One
// above n gets SIGTERM (it tells the chief it leaves; a PS waits until its
// variables moved off) and is not restarted; one below n that does not run
// is started (beyond the spec, it joins the job).
void Scale(Launcher* launcher, std::vector<Child>* children, const std::string& job, int n, int64_t step) {
  std::vector<std::string> started, stopped;
  for (Child& c : *children) {
    if (c.task.job() != job) continue;
    const bool runs = c.process && c.process->Running();
    if (c.task.index() >= n && runs) {
      c.process->Signal(SIGTERM);
      (void)c.process->Wait(absl::Seconds(job == kPsJob ? 70 : 10));
      c.process.reset();
      c.finished = true;  // never restarted
      stopped.push_back(TaskName(c.task));
    } else if (c.task.index() < n && c.finished && !c.process) {
      c.finished = false;
      c.restarts = 0;
      c.restart_at = absl::InfinitePast();
      if (launcher->Start(&c).ok()) started.push_back(TaskName(c.task));
    }
  }
  launcher->Say(absl::StrCat("scaling to ", n, job == kPsJob ? " PS" : " workers", " at step ", step,
                             started.empty() ? "" : absl::StrCat(": started ", absl::StrJoin(started, ", ")),
                             stopped.empty() ? "" : absl::StrCat(": stopped (SIGTERM) ", absl::StrJoin(stopped, ", "))));
}

// The strategy a job file names, for the cluster's shape: a
// multi_worker_mirrored job gets no ps tasks without being told twice.
// parameter_server where there is no job or it does not parse (the chief
// then says why).
std::string StrategyOfJob(const std::string& path) {
  if (path.empty()) return "parameter_server";
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  TrainingJob job;
  if (!in || !google::protobuf::TextFormat::ParseFromString(text.str(), &job)) return "parameter_server";
  switch (job.strategy().kind_case()) {
    case StrategyDef::kMultiWorkerMirrored:
      return "multi_worker_mirrored";
    case StrategyDef::kMirrored:
      return "mirrored";
    case StrategyDef::kCentralStorage:
      return "central_storage";
    case StrategyDef::kHybrid:
      return "hybrid";
    default:
      return "parameter_server";
  }
}

int Run(int argc, char** argv) {
  constexpr char kUsage[] =
      "Starts a whole cluster (chief, parameter servers, workers) on this machine and trains a job.\n"
      "Usage: local_cluster [--job=FILE] [--cluster_spec=FILE] [--kill=ps:1@800]";
  HandleHelp(argc, argv, kUsage, {{__FILE__}, {}});
  absl::SetProgramUsageMessage(kUsage);
  absl::ParseCommandLine(argc, argv);
  std::string run_dir = Here(absl::GetFlag(FLAGS_run_dir));
  if (run_dir.empty()) run_dir = absl::StrCat("/tmp/psrt-run-", absl::ToUnixSeconds(absl::Now()));
  std::system(absl::StrCat("mkdir -p '", run_dir, "'").c_str());
  Launcher launcher(run_dir, absl::GetFlag(FLAGS_verbose));

  std::string strategy = absl::GetFlag(FLAGS_strategy);
  if (strategy.empty()) strategy = StrategyOfJob(Here(absl::GetFlag(FLAGS_job)));
  const std::map<std::string, std::string> default_jobs = {
      {"parameter_server", "examples/fashion_mnist_mlp.pbtxt"},
      {"multi_worker_mirrored", "examples/fashion_mnist_mlp_mirrored.pbtxt"},
      {"mirrored", "examples/fashion_mnist_mlp_devices.pbtxt"},
      {"central_storage", "examples/fashion_mnist_mlp_central_storage.pbtxt"},
      {"hybrid", "examples/sparse_libsvm_hybrid.pbtxt"}};
  if (default_jobs.count(strategy) == 0) {
    std::cerr << "error: --strategy=" << strategy
              << ": expected parameter_server, multi_worker_mirrored, mirrored, central_storage or hybrid\n";
    return 2;
  }
  const bool mirrored = strategy != "parameter_server" && strategy != "hybrid";
  const bool one_worker = strategy == "mirrored" || strategy == "central_storage";
  std::string spec_path = Here(absl::GetFlag(FLAGS_cluster_spec));
  if (spec_path.empty()) {
    absl::StatusOr<std::string> p =
        DefaultSpec(run_dir, mirrored ? 0 : absl::GetFlag(FLAGS_ps), one_worker ? 1 : absl::GetFlag(FLAGS_workers),
                    absl::GetFlag(FLAGS_evaluator));
    if (!p.ok()) {
      std::cerr << "error: " << p.status().message() << "\n";
      return 2;
    }
    spec_path = *p;
  }
  absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromJsonFile(spec_path);
  if (!spec.ok()) {
    std::cerr << "error: " << spec.status().message() << "\n";
    return 2;
  }
  std::string job = Here(absl::GetFlag(FLAGS_job));
  if (job.empty()) job = Binary(argv[0], default_jobs.at(strategy));
  if (access(job.c_str(), R_OK) != 0) {
    std::cerr << "error: cannot read job file " << job << "\n";
    return 2;
  }
  // --kill=TASK@STEP and --remove=TASK@STEP: task -> (step, for good).
  std::map<std::string, std::pair<int64_t, bool>> kills;
  for (const bool for_good : {false, true}) {
    const char* flag = for_good ? "--remove=" : "--kill=";
    for (const std::string& k : absl::GetFlag(for_good ? FLAGS_remove : FLAGS_kill)) {
      std::vector<std::string> parts = absl::StrSplit(k, '@');
      int64_t step;
      absl::StatusOr<TaskId> t = parts.size() == 2 ? ParseTaskId(parts[0]) : absl::InvalidArgumentError("");
      if (!t.ok() || !absl::SimpleAtoi(parts[1], &step) || !spec->AddressOf(*t).ok()) {
        std::cerr << "error: " << flag << k << ": expected TASK@STEP with a task of the spec, e.g. "
                  << (for_good ? "worker:1@3000" : "ps:1@800") << "\n";
        return 2;
      }
      if (for_good && t->job() == kChiefJob) {
        std::cerr << "error: " << flag << k << ": the chief cannot be removed (kill it to watch a takeover)\n";
        return 2;
      }
      kills[TaskName(*t)] = {step, for_good};
    }
  }

  // --scale=JOB:N@STEP: (step, job, N), in step order.
  std::vector<std::tuple<int64_t, std::string, int>> scales;
  std::map<std::string, int> most = {{std::string(kWorkerJob), spec->NumTasks(kWorkerJob)},
                                     {std::string(kPsJob), spec->NumTasks(kPsJob)}};
  for (const std::string& k : absl::GetFlag(FLAGS_scale)) {
    std::vector<std::string> parts = absl::StrSplit(k, absl::ByAnyChar(":@"));
    int64_t step;
    int n;
    if (parts.size() != 3 || most.count(parts[0]) == 0 || !absl::SimpleAtoi(parts[1], &n) || n < 1 || n > 1024 ||
        !absl::SimpleAtoi(parts[2], &step) || step < 0) {
      std::cerr << "error: --scale=" << k
                << ": expected worker:N@STEP or ps:N@STEP with N in [1, 1024], e.g. worker:3@1500\n";
      return 2;
    }
    scales.emplace_back(step, parts[0], n);
    most[parts[0]] = std::max(most[parts[0]], n);
  }
  std::stable_sort(scales.begin(), scales.end(),
                   [](const auto& a, const auto& b) { return std::get<0>(a) < std::get<0>(b); });
  // Tasks beyond the spec: free loopback ports, and a spec naming them too
  // for those tasks only (as a TFJob or StatefulSet scaled up writes the
  // new pod's TF_CONFIG); the chief keeps the spec it started with.
  std::string joiner_spec_path;
  std::vector<TaskId> cert_tasks = spec->AllTasks();  // and the joiners': certificates and tokens
  if (most[std::string(kWorkerJob)] > spec->NumTasks(kWorkerJob) || most[std::string(kPsJob)] > spec->NumTasks(kPsJob)) {
    ClusterDef def = spec->def();
    for (ClusterJob& j : *def.mutable_job()) {
      if (most.count(j.name()) == 0) continue;
      while (j.address_size() < most[j.name()]) {
        absl::StatusOr<int> port = PickFreePort();
        if (!port.ok()) {
          std::cerr << "error: " << port.status().message() << "\n";
          return 2;
        }
        j.add_address(absl::StrCat("127.0.0.1:", *port));
      }
    }
    absl::StatusOr<ClusterSpec> joined = ClusterSpec::FromClusterDef(def, "--scale");
    if (!joined.ok()) {
      std::cerr << "error: " << joined.status().message() << "\n";
      return 2;
    }
    joiner_spec_path = run_dir + "/cluster-scaled.json";
    cert_tasks = joined->AllTasks();
    std::ofstream(joiner_spec_path) << joined->ToJson() << "\n";
  }

  absl::StatusOr<int> http_port = PickFreePort();
  if (!http_port.ok()) {
    std::cerr << "error: " << http_port.status().message() << "\n";
    return 2;
  }
  // --tls: one certificate per task (named JOB-INDEX), one for this launcher
  // (an observer: it reads JobStatus). --role_tokens: a token per role.
  const std::string certs = run_dir + "/certs";
  const bool tls = absl::GetFlag(FLAGS_tls), role_tokens = absl::GetFlag(FLAGS_role_tokens);
  RpcOptions rpc;
  if (tls || role_tokens) {
    std::string command = absl::StrCat("'", Binary(argv[0], "deploy/make_certs.sh"), "' '", certs, "' launcher");
    for (const TaskId& t : cert_tasks) command += absl::StrCat(" ", t.job(), "-", t.index());
    if (std::system(absl::StrCat(command, " > '", run_dir, "/make_certs.log' 2>&1").c_str()) != 0) {
      std::cerr << "error: making certificates failed, see " << run_dir << "/make_certs.log\n";
      return 2;
    }
    SecurityPaths paths;
    if (tls) paths = {certs + "/ca.pem", certs + "/launcher.pem", certs + "/launcher.key"};
    if (role_tokens) paths.token_file = certs + "/tokens/observer";
    absl::StatusOr<TransportSecurity> security = LoadTransportSecurity(paths);
    if (!security.ok()) {
      std::cerr << "error: " << security.status().message() << "\n";
      return 2;
    }
    rpc.security = *security;
  }
  auto security_flags = [&](const TaskId& t) {
    std::vector<std::string> flags;
    std::string name = absl::StrCat(certs, "/", t.job(), "-", t.index());
    if (tls) flags = {"--tls_ca=" + certs + "/ca.pem", "--tls_cert=" + name + ".pem", "--tls_key=" + name + ".key"};
    // A demonstration on one machine: a mirrored job's ring goes in clear
    // over loopback (said once below, as every worker logs it).
    if (tls && t.job() == kWorkerJob) flags.push_back("--allow_plaintext_collective");
    // Each task's own token (make_certs.sh writes tokens/JOB-N for the
    // chief, PS and workers); the role's file for any other.
    if (role_tokens) {
      std::string token_file = absl::StrCat(certs, "/tokens/", t.job(), "-", t.index());
      if (access(token_file.c_str(), R_OK) != 0) token_file = absl::StrCat(certs, "/tokens/", t.job());
      flags.push_back("--auth_token_file=" + token_file);
    }
    return flags;
  };
  std::vector<Child> children;
  // The evaluator: evaluator:0 of the spec, or one outside it when
  // --evaluator comes with a spec that has none. It makes no RPC, so it
  // takes no security flags.
  const bool spec_evaluator = spec->AddressOf(MakeTaskId(kEvaluatorJob, 0)).ok();
  std::string evaluator_logs;
  if (spec_evaluator || absl::GetFlag(FLAGS_evaluator)) {
    absl::StatusOr<int> port = PickFreePort();
    if (!port.ok()) {
      std::cerr << "error: " << port.status().message() << "\n";
      return 2;
    }
    evaluator_logs = run_dir + "/logs/evaluator";
    Child c;
    c.task = MakeTaskId(kEvaluatorJob, 0);
    c.argv = {Binary(argv[0], "worker/evaluator"), "--job=" + job, "--checkpoint_dir=" + run_dir + "/checkpoints",
              "--snapshot_dir=" + run_dir, "--tensorboard_dir=" + evaluator_logs,
              absl::StrCat("--http_port=", *port)};
    if (spec_evaluator) {
      c.argv.push_back("--cluster_spec=" + spec_path);
      c.argv.push_back("--task=evaluator:0");
    }
    children.push_back(std::move(c));
  }
  for (const TaskId& t : spec->AllTasks()) {
    if (t.job() == kEvaluatorJob) continue;
    Child c;
    c.task = t;
    std::string base = "--cluster_spec=" + spec_path;
    std::string task = "--task=" + TaskName(t);
    if (t.job() == kPsJob) c.argv = {Binary(argv[0], "ps/server"), base, task, "--snapshot_dir=" + run_dir};
    if (t.job() == kWorkerJob) {
      // A mirrored worker's replica snapshots beside the PS's would.
      c.argv = {Binary(argv[0], "worker/main"), base, task, "--snapshot_dir=" + run_dir};
    }
    if (t.job() == kChiefJob) {
      c.argv = {Binary(argv[0], "chief/main"), base, task, "--job=" + job,
                "--checkpoint_dir=" + run_dir + "/checkpoints", "--summary=" + run_dir + "/summary.json",
                "--tensorboard_dir=" + run_dir + "/logs", absl::StrCat("--http_port=", *http_port)};
    }
    for (const std::string& f : security_flags(t)) c.argv.push_back(f);
    // The user's extra flags last: they win over the launcher's own.
    if (t.job() == kPsJob) {
      for (const std::string& f : absl::GetFlag(FLAGS_ps_flags)) c.argv.push_back(f);
    }
    if (t.job() == kWorkerJob) {
      for (const std::string& f : absl::GetFlag(FLAGS_worker_flags)) c.argv.push_back(f);
    }
    children.push_back(std::move(c));
  }
  // Workers and PS --scale may start later: not started now.
  for (const auto& [job_name, n] : most) {
    for (int i = spec->NumTasks(job_name); i < n; ++i) {
      Child c;
      c.task = MakeTaskId(job_name, i);
      const bool ps = job_name == kPsJob;
      c.argv = {Binary(argv[0], ps ? "ps/server" : "worker/main"), "--cluster_spec=" + joiner_spec_path,
                "--task=" + TaskName(c.task), "--snapshot_dir=" + run_dir};
      for (const std::string& f : security_flags(c.task)) c.argv.push_back(f);
      for (const std::string& f : absl::GetFlag(ps ? FLAGS_ps_flags : FLAGS_worker_flags)) c.argv.push_back(f);
      c.finished = true;  // stopped until a --scale starts it
      children.push_back(std::move(c));
    }
  }
  if (tls) {
    launcher.Say("mutual TLS, certificates in " + certs +
                 " (a mirrored job's ring all-reduce is not encrypted: workers get --allow_plaintext_collective)");
  }
  if (role_tokens) launcher.Say("per-role tokens in " + certs + "/tokens, each task with its own (tokens/JOB-N)");
  launcher.Say(absl::StrCat("cluster ", spec_path, " (", spec->ToJson(), "), job ", job, ", logs ",
                            run_dir, "/cluster.log"));
  // PS and workers first, the chief last: it waits for them anyway.
  std::stable_sort(children.begin(), children.end(),
                   [](const Child& a, const Child& b) { return a.task.job() != kChiefJob && b.task.job() == kChiefJob; });
  for (Child& c : children) {
    if (c.finished) continue;  // a worker for --scale
    if (absl::Status s = launcher.Start(&c); !s.ok()) {
      std::cerr << "error: starting " << TaskName(c.task) << ": " << s.message() << "\n";
      return 2;
    }
  }
  signal(SIGINT, [](int) { g_interrupted = true; });
  signal(SIGTERM, [](int) { g_interrupted = true; });

  ChannelCache channels(rpc);
  std::string chief_address = *spec->AddressOf(MakeTaskId(kChiefJob, 0));
  auto chief = std::make_unique<ChiefClient>(channels.Get(chief_address), chief_address, absl::Seconds(1));
  absl::Time next_poll = absl::InfinitePast();
  int exit_code = -1;
  while (exit_code < 0) {
    if (g_interrupted) {
      launcher.Say("interrupted: stopping the cluster (checkpoints stay; run again to resume)");
      exit_code = 130;
      break;
    }
    if ((!kills.empty() || !scales.empty()) && absl::Now() >= next_poll) {
      next_poll = absl::Now() + absl::Milliseconds(100);
      absl::StatusOr<JobStatusResponse> st = chief->JobStatus();
      if (!st.ok()) {
        // Until the chief listens, a channel's failed connects leave it
        // backing off for seconds (a fast job ends first): start afresh.
        channels.Drop(chief_address);
        chief = std::make_unique<ChiefClient>(channels.Get(chief_address), chief_address, absl::Seconds(1));
      }
      for (auto it = kills.begin(); st.ok() && it != kills.end();) {
        if (st->step() < it->second.first) {
          ++it;
          continue;
        }
        for (Child& c : children) {
          if (TaskName(c.task) == it->first && c.process && c.process->Running()) {
            c.process->Signal(SIGKILL);
            if (it->second.second) {
              (void)c.process->Wait(absl::Seconds(10));
              c.process.reset();
              c.finished = true;  // never restarted
              launcher.Say(absl::StrCat("removed ", it->first, " for good (SIGKILL, not restarted) at step ",
                                        st->step()));
            } else {
              launcher.Say(absl::StrCat("killed ", it->first, " with SIGKILL at step ", st->step()));
            }
          }
        }
        it = kills.erase(it);
      }
      while (st.ok() && !scales.empty() && st->step() >= std::get<0>(scales.front())) {
        Scale(&launcher, &children, std::get<1>(scales.front()), std::get<2>(scales.front()), st->step());
        scales.erase(scales.begin());
      }
    }
    for (Child& c : children) {
      if (c.finished) continue;
      if (!c.process) {
        if (absl::Now() >= c.restart_at) {
          launcher.Say(absl::StrCat("restarting ", TaskName(c.task), " (restart ", c.restarts, ")"));
          if (!launcher.Start(&c).ok()) c.restart_at = absl::Now() + absl::Seconds(1);
        }
        continue;
      }
      std::optional<int> status = c.process->Poll();
      if (!status.has_value()) continue;
      bool clean = WIFEXITED(*status) && WEXITSTATUS(*status) == 0;
      if (c.task.job() == kChiefJob) {
        if (clean) {
          exit_code = 0;
          break;
        }
        if (WIFEXITED(*status) && WEXITSTATUS(*status) == kExitNoFinalMetric) {
          // Trained, but the final evaluation failed: the job is over (a
          // restarted chief would train nothing), and not a success.
          launcher.Say("the chief finished training but its final evaluation failed: no final metric");
          exit_code = kExitNoFinalMetric;
          break;
        }
        if (WIFEXITED(*status) && WEXITSTATUS(*status) == kExitJobRefused) {
          // A worker refused the job as written (the chief's error says
          // why): a restarted chief would be refused the same way.
          launcher.Say("the job cannot run as written (the chief's error above says why): not restarting it");
          exit_code = kExitJobRefused;
          break;
        }
      } else if (clean) {
        c.finished = true;  // a worker the chief shut down at the end
        continue;
      }
      launcher.Say(absl::StrCat(TaskName(c.task), " died: ", DescribeWaitStatus(*status)));
      if (++c.restarts > absl::GetFlag(FLAGS_max_restarts) && c.task.job() == kEvaluatorJob) {
        // Training does not need the evaluator: it goes on without one.
        launcher.Say(absl::StrCat("giving up on ", TaskName(c.task), " (died ", c.restarts,
                                  " times); training goes on without it"));
        c.process.reset();
        c.finished = true;
        continue;
      }
      if (c.restarts > absl::GetFlag(FLAGS_max_restarts)) {
        launcher.Say(absl::StrCat("giving up: ", TaskName(c.task), " died ", c.restarts, " times"));
        exit_code = 1;
        break;
      }
      c.process.reset();
      c.restart_at = absl::Now() + std::min(absl::Seconds(5), absl::Milliseconds(100) * (1 << std::min(c.restarts, 6)));
    }
    absl::SleepFor(absl::Milliseconds(20));  // the supervision tick
  }
  // The job is done: the evaluator ends by itself once it has evaluated
  // the final checkpoint (the chief marks the job over after committing it).
  for (Child& c : children) {
    if (exit_code != 0 || c.task.job() != kEvaluatorJob || !c.process || !c.process->Running()) continue;
    launcher.Say("waiting for the evaluator to evaluate the final checkpoint");
    absl::StatusOr<int> status = c.process->Wait(absl::Seconds(absl::GetFlag(FLAGS_evaluator_wait_s)));
    if (!status.ok()) launcher.Say("the evaluator did not finish in time: stopping it");
    if (status.ok()) c.process.reset();
  }
  // Stop everything: SIGTERM, then SIGKILL whatever is left.
  for (Child& c : children) {
    if (c.process && c.process->Running()) c.process->Signal(SIGTERM);
  }
  for (Child& c : children) {
    if (c.process && !c.process->Wait(absl::Seconds(5)).ok()) c.process->Signal(SIGKILL);
  }
  children.clear();
  if (exit_code == 0 || exit_code == kExitNoFinalMetric) {
    std::ifstream in(run_dir + "/summary.json");
    std::stringstream ss;
    ss << in.rdbuf();
    std::smatch m;
    std::string summary = ss.str();
    std::string failures = std::regex_search(summary, m, std::regex("\"failures_survived\": ([0-9]+)")) ? m[1].str() : "0";
    std::string result;
    if (std::regex_search(summary, m, std::regex("\"final_evaluation_error\": (\"(\\\\.|[^\"\\\\])*\")"))) {
      result = "error: no final metric: the final evaluation failed: " + m[1].str();
    } else if (std::regex_search(summary, m, std::regex("\"accuracy\": ([0-9.]+)"))) {
      result = "final test accuracy " + m[1].str();
    } else if (std::regex_search(summary, m, std::regex("\"metrics\": \\{([^}]+)\\}"))) {
      result = "final test metrics " + m[1].str();
    } else {
      result = "no final metric: the job has no test split (input.test)";
    }
    if (std::regex_search(summary, m, std::regex("\"stopped_early_at_step\": ([0-9]+)"))) {
      std::smatch total;
      result += " (stopped early at step " + m[1].str() +
                (std::regex_search(summary, total, std::regex("\"total_steps\": ([0-9]+)"))
                     ? " of " + total[1].str() + ")"
                     : ")");
    }
    std::cout << "\n" << result << " (failures survived: " << failures << ")\n"
              << "summary:     " << run_dir << "/summary.json\n"
              << "checkpoints: " << run_dir << "/checkpoints\n"
              << "logs:        " << run_dir << "/cluster.log\n"
              << "tensorboard: tensorboard --logdir " << run_dir << "/logs\n";
    if (!evaluator_logs.empty()) {
      std::cout << "evaluator:   " << evaluator_logs << " (TensorBoard run \"evaluator\", eval/<metric>)\n";
    }
  }
  return exit_code;
}

}  // namespace
}  // namespace psrt

int main(int argc, char** argv) { return psrt::Run(argc, argv); }
