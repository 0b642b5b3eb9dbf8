// The chief daemon.
//
//   bazel run //chief:main -- --cluster_spec=FILE --job=JOB.pbtxt
//       [--checkpoint_dir=DIR] [--restore=auto|never|STEP]
//
// Waits for every task to register, plans the job, creates (or restores)
// the variables, starts the workers and coordinates: progress, checkpoints,
// evaluation, recovery. Restarted, it resumes from the newest committed
// checkpoint (--restore=auto). Ends with a JSON summary and exit 0, or an
// error and exit 1.
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "chief/chief_service.h"
#include "common/exit_codes.h"
#include "common/job_identity.h"
#include "chief/coordinator.h"
#include "chief/http_status.h"
#include "common/rpc/security.h"
#include "common/plan/job_flags.h"
#include "common/plan/job_planner.h"
#include "common/daemon.h"
#include "common/env.h"
#include "common/io/event_writer.h"
#include "common/metrics/metrics_http.h"
#include "common/rpc/channel_cache.h"
#include "common/rpc/serve.h"
#include "glog/logging.h"
#include "grpcpp/grpcpp.h"

ABSL_FLAG(std::string, job, "", "Training job (.pbtxt). Required.");
ABSL_FLAG(std::string, checkpoint_dir, "", "Checkpoint directory (default: the job's checkpoint.dir).");
ABSL_FLAG(std::string, restore, "auto",
          "auto: restore the newest committed checkpoint if there is one; never; or a step.");
ABSL_FLAG(std::string, summary, "", "Write the JSON summary here (default: the job's summary_path).");
ABSL_FLAG(std::string, tensorboard_dir, "", "TensorBoard event files go here (default: the job's log_dir).");
ABSL_FLAG(std::string, listen, "", "Address to listen on (default: the chief's address in the spec).");
ABSL_FLAG(int, threads, 0, "Threads for evaluation kernels (0 = one per core).");
ABSL_FLAG(int, fault_kill_before_commit, 0,
          "Fault injection for tests: SIGKILL the chief just before it commits its Nth checkpoint.");

namespace psrt {
namespace {

int Main(int argc, char** argv) {
  BlockTerminationSignals();
  InitDaemon(argc, argv,
             "Chief: plans the job, places variables, coordinates workers, checkpoints, recovers.\n"
             "Usage: main --cluster_spec=FILE --job=JOB.pbtxt [--checkpoint_dir=DIR] [--restore=auto|never|STEP]",
             {{__FILE__, DaemonFlagsFile(), JobFlagsFile(), HttpFlagsFile()}, {}});
  if (absl::GetFlag(FLAGS_task).empty() && std::getenv("TF_CONFIG") == nullptr) absl::SetFlag(&FLAGS_task, "chief:0");
  absl::StatusOr<TaskConfig> config = TaskConfigFromFlags();
  if (!config.ok()) return ExitWithError(config.status());
  if (config->task.job() != kChiefJob) {
    return ExitWithError(absl::InvalidArgumentError(absl::StrCat("--task=", TaskName(config->task), ": this is the chief")));
  }
  if (absl::GetFlag(FLAGS_job).empty()) return ExitWithError(absl::InvalidArgumentError("--job=FILE is required"));
  absl::StatusOr<HttpFlags> http_flags = HttpFlagsFromFlags();
  if (!http_flags.ok()) return ExitWithError(http_flags.status());
  absl::StatusOr<JobLimits> limits = JobLimitsFromFlags();
  if (!limits.ok()) return ExitWithError(limits.status());
  absl::StatusOr<TrainingJob> job = LoadJob(UserPath(absl::GetFlag(FLAGS_job)), *limits);
  if (!job.ok()) return ExitWithError(job.status());
  // A test split that cannot be read fails the job now, not after training.
  if (absl::Status test = CheckTestSplit(*job); !test.ok()) return ExitWithError(test);

  const uint64_t incarnation = NewIncarnationId();
  absl::Duration timeout = absl::Milliseconds(job->failure().heartbeat_timeout_ms() > 0 ? job->failure().heartbeat_timeout_ms() : 10000);
  TaskRegistry registry(config->cluster, timeout);
  {
    TaskInfo self;
    *self.mutable_task() = config->task;
    self.set_address(config->address);
    self.set_incarnation(incarnation);
    (void)registry.Register(self);  // the chief counts among the tasks of the spec
  }
  absl::StatusOr<RpcOptions> rpc_flags = RpcOptionsFromFlags();
  if (!rpc_flags.ok()) return ExitWithError(rpc_flags.status());
  RpcOptions rpc = *rpc_flags;
  ChannelCache channels(rpc);
  CoordinatorOptions o;
  o.job = *job;
  o.cluster = config->cluster;
  o.checkpoint_dir = UserPath(absl::GetFlag(FLAGS_checkpoint_dir));
  o.restore = absl::GetFlag(FLAGS_restore);
  o.incarnation = incarnation;
  o.fault_kill_before_commit = absl::GetFlag(FLAGS_fault_kill_before_commit);
  o.report = [](const std::string& line) {
    std::cout << line << std::endl;
    LOG(INFO) << line;
  };
  std::unique_ptr<EventWriter> events;
  std::string log_dir = absl::GetFlag(FLAGS_tensorboard_dir).empty() ? job->log_dir() : absl::GetFlag(FLAGS_tensorboard_dir);
  if (!log_dir.empty()) {
    absl::StatusOr<std::unique_ptr<EventWriter>> w = EventWriter::Create(UserPath(log_dir));
    if (!w.ok()) return ExitWithError(w.status());
    events = *std::move(w);
    LOG(INFO) << "TensorBoard events: " << events->path();
    o.scalar = [&events](const std::string& tag, int64_t step, float value) {
      (void)events->AddScalar(tag, step, value);
      (void)events->Flush();
    };
  }
  const int threads = absl::GetFlag(FLAGS_threads);
  // A job whose worker would refuse its Start (or its replica's variables)
  // as too large stops here, saying so, instead of retrying the Start.
  const int64_t max_worker_message = ServerReceiveLimit(rpc);
  Planner planner = [max_worker_message](const TrainingJob& job, int num_ps) -> absl::StatusOr<JobPlan> {
    absl::StatusOr<JobPlan> plan = PlanJob(job, num_ps);
    if (!plan.ok()) return plan.status();
    absl::Status fits = CheckWorkerMessageSizes(job, *plan, num_ps, max_worker_message);
    if (!fits.ok()) return fits;
    return plan;
  };
  Evaluator evaluator;
  if (job->input().test().files_size() > 0) {
    evaluator = [job = *job, threads](const std::map<std::string, Tensor>& vars,
                                      const RowReader& rows) -> absl::StatusOr<std::map<std::string, float>> {
      absl::StatusOr<JobPlan> plan = PlanJob(job, 1);
      if (!plan.ok()) return plan.status();
      return MakeEvaluator(job, *plan, threads)(vars, rows);
    };
  }
  Coordinator coordinator(o, &registry, &channels, planner, evaluator);
  ChiefServiceImpl service(&registry, incarnation);
  service.job_status = [&] { return coordinator.Status(); };

  std::string listen = absl::GetFlag(FLAGS_listen);
  if (listen.empty()) listen = ListenAddressFor(config->address);
  service.set_authenticator(RequestAuthenticator(rpc.security));
  service.set_job_identity(MakeJobIdentity(config->job_name, config->cluster));
  absl::StatusOr<std::unique_ptr<grpc::Server>> server = StartServer(listen, rpc, {&service});
  if (!server.ok()) return ExitWithError(server.status());
  LOG(INFO) << "chief serving at " << listen << " (incarnation " << std::hex << incarnation << std::dec << ")";

  HttpStatusServer http([&] {
    JobStatusResponse s = coordinator.Status();
    for (const TaskState& t : registry.All()) *s.add_task() = t.info;
    return s;
  });
  if (http_flags->port > 0) {
    absl::Status s = http.Start(http_flags->host, http_flags->port, http_flags->token);
    if (!s.ok()) return ExitWithError(s);
    std::cout << "status page " << HttpBaseUrl(http_flags->host, http.port()) << "/ and /metrics"
              << (http_flags->token.empty() ? "" : " (token required)") << std::endl;
  }

  std::thread signals([] {
    int sig = WaitForTerminationSignal();
    LOG(WARNING) << "signal " << sig << ": stopping the chief (the job can resume from its last checkpoint)";
    std::_Exit(130);
  });
  signals.detach();

  absl::StatusOr<JobSummary> summary = coordinator.Run();
  (*server)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  if (!summary.ok()) {
    const int code = ExitWithError(summary.status());
    // Not a crash to restart from: the job itself must change first.
    return IsAssignmentRefused(summary.status()) ? kExitJobRefused : code;
  }
  std::string path = UserPath(absl::GetFlag(FLAGS_summary));
  if (path.empty()) path = job->summary_path();
  if (!path.empty()) {
    std::ofstream(path) << summary->ToJson();
    std::cout << "summary: " << path << std::endl;
  }
  auto acc = summary->metrics.find("accuracy");
  std::cout << "done: " << summary->steps << " steps in " << summary->wall_seconds << " s"
            << (acc != summary->metrics.end() ? absl::StrCat(", test accuracy ", acc->second) : "")
            << ", failures survived " << summary->failures_survived << ", checkpoints in "
            << summary->checkpoint_dir << std::endl;
  if (!summary->final_evaluation_error.empty()) {
    // Trained and checkpointed, but with no final metric: not a success.
    std::cerr << "error: training finished at step " << summary->steps
              << " but its final evaluation failed, so the run has no final metric: "
              << summary->final_evaluation_error << " (evaluate the final checkpoint with "
              << "//worker:evaluator or //chief:export --evaluate once the test split reads)" << std::endl;
    return kExitNoFinalMetric;
  }
  return 0;
}

}  // namespace
}  // namespace psrt

int main(int argc, char** argv) { return psrt::Main(argc, argv); }
