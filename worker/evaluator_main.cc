// The evaluator daemon (TensorFlow's `evaluator` task).
//
//   bazel run //worker:evaluator -- --checkpoint_dir=DIR [--job=JOB.pbtxt]
//       [--snapshot_dir=ROOT] [--tensorboard_dir=LOGS] [--http_port=N]
//       [--cluster_spec=FILE --task=evaluator:0 | TF_CONFIG]
//
// The job is the one the checkpoints record (each manifest holds the job
// that wrote it): without --job the evaluator waits for the first committed
// checkpoint and takes its job. A --job whose model is not the recorded one
// is refused saying so, as by `export`.
//
// Follows the chief's committed checkpoints in DIR and evaluates each on the
// job's test split (worker/checkpoint_evaluator.h says which ones and when
// it stops), writing `eval/<metric>` scalars to TensorBoard event files in
// LOGS (default: the job's log_dir + "/evaluator", a run of its own beside
// the chief's) and serving them on /metrics. It talks to no daemon: it
// reads the checkpoints' snapshot stores from disk, read-only, at a lower
// CPU priority (--nice), so training does not wait for it. Exits 0 when
// the chief's job is finished and its final checkpoint evaluated, or on
// SIGTERM/SIGINT.
//
// A spec or TF_CONFIG is optional (the evaluator needs no peer's address):
// a valid one must name an `evaluator` task; one that does not parse as a
// training cluster (TensorFlow's evaluator-only cluster) is logged and
// passed over.
#include <sys/resource.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/daemon.h"
#include "common/io/event_writer.h"
#include "common/plan/job_flags.h"
#include "common/plan/job_planner.h"
#include "glog/logging.h"
#include "worker/checkpoint_evaluator.h"
#include "worker/evaluator_metrics.h"

ABSL_FLAG(std::string, job, "",
          "Training job (.pbtxt), the chief's. Empty: the job the checkpoints record (waits for the first one).");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "The chief's checkpoint directory (default: --job's checkpoint.dir; required without --job).");
ABSL_FLAG(std::string, snapshot_dir, "",
          "The --snapshot_dir of the PS (and mirrored workers): their stores are in "
          "ROOT/<last component of the checkpoint directory>. Empty: in the checkpoint directory "
          "itself (the daemons' --snapshot_dir is the directory above it).");
ABSL_FLAG(std::string, tensorboard_dir, "",
          "TensorBoard event files go here (default: the job's log_dir + \"/evaluator\"; none if both are empty).");
ABSL_FLAG(int, http_port, 0, "Serve /metrics (Prometheus) on this port (0 = off).");
ABSL_FLAG(std::string, http_listen, "127.0.0.1", "IP address /metrics listens on.");
ABSL_FLAG(int, threads, 1, "Threads for evaluation kernels (0 = one per core).");
ABSL_FLAG(int, poll_ms, 200, "How often to look for a new committed checkpoint, in milliseconds.");
ABSL_FLAG(int, nice, 10, "Lower this process's CPU priority by this much (0 = leave it), so training goes first.");

namespace psrt {
namespace {

int Main(int argc, char** argv) {
  BlockTerminationSignals();
  InitDaemon(argc, argv,
             "Evaluator: follows the chief's committed checkpoints and evaluates each on the test split.\n"
             "Usage: evaluator --checkpoint_dir=DIR [--job=JOB.pbtxt] [--snapshot_dir=ROOT] "
             "[--tensorboard_dir=LOGS] [--http_port=N]",
             {{__FILE__, JobFlagsFile()}, {"cluster_spec", "task"}});
  if (!absl::GetFlag(FLAGS_cluster_spec).empty() || std::getenv("TF_CONFIG") != nullptr) {
    // What TensorFlow and Kubeflow give an evaluator often is no whole
    // training cluster: only {"evaluator": [...]}, or the training tasks
    // without the evaluator itself. It needs no peer's address, so such a
    // spec is named and passed over; a valid one must name an evaluator.
    absl::StatusOr<TaskConfig> config = TaskConfigFromFlags();
    if (!config.ok()) {
      LOG(WARNING) << "not using the cluster spec (the evaluator needs no peer): " << config.status().message();
    } else if (config->task.job() != kEvaluatorJob) {
      return ExitWithError(absl::InvalidArgumentError(
          absl::StrCat("task ", TaskName(config->task), ": this is the evaluator (task type \"evaluator\")")));
    }
  }
  if (absl::GetFlag(FLAGS_poll_ms) <= 0) return ExitWithError(absl::InvalidArgumentError("--poll_ms must be > 0"));
  const std::string job_path = UserPath(absl::GetFlag(FLAGS_job));
  CheckpointEvaluatorOptions o;
  o.checkpoint_dir = UserPath(absl::GetFlag(FLAGS_checkpoint_dir));
  if (job_path.empty() && o.checkpoint_dir.empty()) {
    return ExitWithError(absl::InvalidArgumentError(
        "--checkpoint_dir=DIR is required (the job is read from its checkpoints; or give --job=FILE)"));
  }

  // A signal before the evaluator exists (while waiting for the first
  // checkpoint) ends the wait; after, it stops the evaluator.
  static std::atomic<bool> stopping{false};
  static std::atomic<CheckpointEvaluator*> running{nullptr};
  std::thread signals([] {
    int sig = WaitForTerminationSignal();
    LOG(WARNING) << "signal " << sig << ": stopping the evaluator";
    stopping = true;
    if (CheckpointEvaluator* e = running.load()) e->Stop();
    // An evaluation in progress is not cut short; do not wait for a long one.
    absl::SleepFor(absl::Seconds(10));
    std::_Exit(130);
  });
  signals.detach();

  absl::StatusOr<TrainingJob> job;
  if (!job_path.empty()) {
    absl::StatusOr<JobLimits> limits = JobLimitsFromFlags();
    if (!limits.ok()) return ExitWithError(limits.status());
    job = LoadJob(job_path, *limits);
    if (!job.ok()) return ExitWithError(job.status());
    if (o.checkpoint_dir.empty()) o.checkpoint_dir = job->checkpoint().dir();
    if (o.checkpoint_dir.empty()) {
      return ExitWithError(absl::InvalidArgumentError("no checkpoint directory: --checkpoint_dir or checkpoint.dir"));
    }
  } else {
    std::cout << "evaluator: waiting for a committed checkpoint in " << o.checkpoint_dir << " (its job is the one)"
              << std::endl;
    job = AwaitRecordedJob(o.checkpoint_dir, absl::Milliseconds(absl::GetFlag(FLAGS_poll_ms)),
                           [] { return stopping.load(); });
    if (!job.ok()) return ExitWithError(job.status());
    std::cout << "evaluator: job \"" << job->name() << "\", as the checkpoints record it" << std::endl;
  }
  o.job = *job;
  const std::string snapshot_dir = UserPath(absl::GetFlag(FLAGS_snapshot_dir));
  if (!snapshot_dir.empty()) {
    // As the PS names its store for a checkpoint: the directory's last component.
    std::string name = std::filesystem::path(std::string(absl::StripSuffix(o.checkpoint_dir, "/"))).filename();
    o.stores_dir = absl::StrCat(snapshot_dir, "/", name);
  }
  o.threads = absl::GetFlag(FLAGS_threads);
  o.poll_interval = absl::Milliseconds(absl::GetFlag(FLAGS_poll_ms));
  o.report = [](const std::string& line) {
    std::cout << "evaluator: " << line << std::endl;
    LOG(INFO) << line;
  };

  // Events are written from Run()'s thread once the writer exists; it is
  // made after the job is accepted, so a refused one leaves no empty file.
  std::unique_ptr<EventWriter> events;
  o.on_metrics = [&events](int64_t step, const std::map<std::string, float>& metrics) {
    if (!events) return;
    for (const auto& [name, value] : metrics) {
      if (name == "examples") continue;
      absl::Status s = events->AddScalar("eval/" + name, step, value);
      if (!s.ok()) LOG(WARNING) << "TensorBoard events: " << s;
    }
    absl::Status s = events->Flush();
    if (!s.ok()) LOG(WARNING) << "TensorBoard events: " << s;
  };
  absl::StatusOr<std::unique_ptr<CheckpointEvaluator>> evaluator = CheckpointEvaluator::Create(o);
  if (!evaluator.ok()) return ExitWithError(evaluator.status());
  std::string log_dir = absl::GetFlag(FLAGS_tensorboard_dir);
  if (log_dir.empty() && !job->log_dir().empty()) log_dir = job->log_dir() + "/evaluator";
  log_dir = UserPath(log_dir);
  if (!log_dir.empty()) {
    absl::StatusOr<std::unique_ptr<EventWriter>> w = EventWriter::Create(log_dir);
    if (!w.ok()) return ExitWithError(w.status());
    events = *std::move(w);
    std::cout << "evaluator: TensorBoard events " << events->path() << std::endl;
  }

  std::unique_ptr<HttpServer> http;
  if (absl::GetFlag(FLAGS_http_port) > 0) {
    const std::string host = absl::GetFlag(FLAGS_http_listen);
    absl::StatusOr<std::unique_ptr<HttpServer>> s =
        ServeEvaluatorMetrics(host, absl::GetFlag(FLAGS_http_port), [&] { return (*evaluator)->Status(); });
    if (!s.ok()) return ExitWithError(s.status());
    http = *std::move(s);
    std::cout << "evaluator: metrics http://" << (host == "127.0.0.1" || host == "0.0.0.0" ? "localhost" : host)
              << ":" << http->port() << "/metrics" << std::endl;
  }
  if (int nice = absl::GetFlag(FLAGS_nice); nice != 0 && ::setpriority(PRIO_PROCESS, 0, nice) != 0) {
    LOG(WARNING) << "cannot lower the priority by " << nice << ": " << std::strerror(errno);
  }

  running = evaluator->get();
  if (stopping) (*evaluator)->Stop();

  LOG(INFO) << "following committed checkpoints in " << o.checkpoint_dir
            << (o.stores_dir.empty() ? "" : absl::StrCat(" (stores in ", o.stores_dir, ")"));
  absl::Status s = (*evaluator)->Run();
  running = nullptr;
  if (http) http->Stop();
  if (!s.ok()) return ExitWithError(s);
  EvaluatorStatus st = (*evaluator)->Status();
  std::cout << "evaluator: done: " << st.evaluated << " checkpoint(s) evaluated, " << st.skipped << " skipped (behind), "
            << st.failed << " failed; last step " << st.step << std::endl;
  return 0;
}

}  // namespace
}  // namespace psrt

int main(int argc, char** argv) { return psrt::Main(argc, argv); }
