// The in-process trainer: a job file trained in one process, no cluster.
//
//   bazel run //deploy:local_train -- --job=$PWD/examples/fashion_mnist_mlp.pbtxt
//
// It runs the same graph, kernels, optimizer and parameter-server code as
// the daemons (an in-process ParameterServerCore behind the worker's
// ParameterClient interface), so it is the baseline every distributed
// figure is measured against.
#include <cstdio>
#include <fstream>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/compute/clipping_step_runner.h"
#include "common/compute/graph_step_runner.h"
#include "common/daemon.h"
#include "common/input/dataset.h"
#include "common/input/source.h"
#include "common/optimizer.h"
#include "common/plan/job_planner.h"
#include "common/plan/warm_start.h"
#include "common/status_macros.h"
#include "common/store/local_ps_client.h"
#include "glog/logging.h"
#include "worker/device_select.h"

ABSL_FLAG(std::string, job, "", "Job file (.pbtxt). Required.");
ABSL_FLAG(int, epochs, 0, "Override the job's epochs.");
ABSL_FLAG(int64_t, steps, 0, "Override the job's steps (0 = from epochs).");
ABSL_FLAG(std::string, summary, "", "Write a JSON summary here (default: the job's summary_path).");
ABSL_FLAG(int, threads, 0, "Kernel threads (0 = one per core).");
ABSL_FLAG(std::string, device, "auto", "auto, cpu or gpu: where the training steps run (evaluation stays on the CPU).");
ABSL_FLAG(int, report_every, 100, "Steps between progress lines.");
ABSL_FLAG(bool, shuffle, true,
          "Shuffle the training examples (false: the files' order, to line steps up with another trainer's).");
ABSL_FLAG(std::string, loss_log, "", "Write each step's training loss here, one per line (a loss curve to compare).");

namespace psrt {
namespace {

absl::Status Train() {
  std::string path = absl::GetFlag(FLAGS_job);
  if (path.empty()) return absl::InvalidArgumentError("--job=FILE is required");
  // `bazel run` starts us in the runfiles tree: resolve relative paths
  // against where the user ran it.
  if (path[0] != '/' && std::getenv("BUILD_WORKING_DIRECTORY")) {
    path = absl::StrCat(std::getenv("BUILD_WORKING_DIRECTORY"), "/", path);
  }
  ASSIGN_OR_RETURN(TrainingJob job, LoadJob(path));
  if (absl::GetFlag(FLAGS_epochs) > 0) {
    job.set_epochs(absl::GetFlag(FLAGS_epochs));
    job.set_steps(0);
  }
  if (absl::GetFlag(FLAGS_steps) > 0) job.set_steps(absl::GetFlag(FLAGS_steps));
  ASSIGN_OR_RETURN(JobPlan plan, PlanJob(job, 1));
  RETURN_IF_ERROR(CheckTestSplit(job));
  if (job.has_warm_start()) {
    // No checkpoint of its own here: every run is a first start.
    std::vector<VariableDef> variables;
    for (const VariablePlacement& vp : plan.placement.variable()) variables.push_back(vp.variable());
    ASSIGN_OR_RETURN(WarmStartValues warm, ReadWarmStart(job, variables));
    ApplyWarmStart(warm, &plan.placement);
    std::printf("warm start: %zu of %zu variables from %s\n", warm.values.size(), variables.size(),
                warm.source.c_str());
  }

  ASSIGN_OR_RETURN(int64_t examples, CountExamples(job.input(), job.input().train()));
  const int64_t per_epoch = (examples + job.input().batch_size() - 1) / job.input().batch_size();
  const int64_t steps = job.steps() > 0 ? job.steps() : std::max(1, job.epochs()) * per_epoch;

  ServerCoreOptions ps_options;
  ps_options.incarnation = 1;
  ParameterServerCore ps(ps_options);
  CreateVariablesRequest create;
  for (const VariablePlacement& vp : plan.placement.variable()) *create.add_variable() = vp.variable();
  *create.mutable_optimizer() = ResolveSchedule(job.optimizer(), steps);
  create.mutable_consistency()->set_mode(ConsistencyDef::ASYNC);
  create.set_num_workers(1);
  RETURN_IF_ERROR(ps.CreateVariables(create).status());
  LocalPsClient client(&ps, 0);

  WorkerAssignment a = AssignmentOf(job, plan);
  const int threads = absl::GetFlag(FLAGS_threads);
  ASSIGN_OR_RETURN(DeviceChoice device, ChooseDevice(absl::GetFlag(FLAGS_device)));
  ASSIGN_OR_RETURN(auto graph_runner, GraphStepRunner::Create(a, threads, ExecutorFactoryFor(device)));
  // The job's gradient clipping, as a worker applies it (none: no wrapper).
  std::unique_ptr<StepRunner> runner = MaybeClipGradients(std::move(graph_runner), a);
  DatasetOptions d;
  d.input = job.input();
  d.split = job.input().train();
  d.seed = job.seed();
  d.shuffle = absl::GetFlag(FLAGS_shuffle);
  ASSIGN_OR_RETURN(auto data, Dataset::Create(d));
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> loss_log(nullptr, &std::fclose);
  if (const std::string path = absl::GetFlag(FLAGS_loss_log); !path.empty()) {
    loss_log.reset(std::fopen(path.c_str(), "w"));
    if (loss_log == nullptr) return absl::NotFoundError(absl::StrCat("--loss_log: cannot write ", path));
  }
  Evaluator evaluate = MakeEvaluator(job, plan, threads);
  std::printf("training %s: %lld examples, batch %d, %lld steps (%lld per epoch), %s\n", job.name().c_str(),
              static_cast<long long>(examples), job.input().batch_size(), static_cast<long long>(steps),
              static_cast<long long>(per_epoch), runner->device().c_str());

  const absl::Time start = absl::Now();
  absl::Time window = start;
  int64_t window_examples = 0;
  double loss_avg = 0;
  std::map<std::string, float> last_eval;
  // Evaluation reads whole variables: dense ones and fixed embedding tables.
  std::vector<std::string> whole;
  for (const VariablePlacement& vp : plan.placement.variable()) {
    if (vp.variable().kind() == VariableDef::HASH_TABLE) {
      return absl::UnimplementedError(
          absl::StrCat("variable ", vp.variable().name(), ": the in-process trainer cannot evaluate hash tables"));
    }
    whole.push_back(vp.variable().name());
  }
  auto eval = [&](int64_t step) -> absl::Status {
    ASSIGN_OR_RETURN(TensorMap vars, client.Pull(whole, step));
    ASSIGN_OR_RETURN(last_eval, evaluate(vars, nullptr));
    std::printf("eval after step %lld: test loss %.4f accuracy %.4f (%d examples)\n", static_cast<long long>(step),
                last_eval["loss"], last_eval["accuracy"], static_cast<int>(last_eval["examples"]));
    std::fflush(stdout);
    return absl::OkStatus();
  };
  for (int64_t step = 0; step < steps; ++step) {
    Batch batch;
    ASSIGN_OR_RETURN(bool more, data->Next(&batch));
    if (!more) break;
    ASSIGN_OR_RETURN(TensorMap dense, client.Pull(runner->DenseVariables(), step));
    ASSIGN_OR_RETURN(RowRequest rows, runner->SparseRows(batch));
    TensorMap pulled;
    if (!rows.empty()) {
      ASSIGN_OR_RETURN(pulled, client.PullRows(rows, step));
    }
    ASSIGN_OR_RETURN(StepResult r, runner->Run(dense, pulled, batch, step));
    RequestId id;
    id.set_step(step);
    id.set_worker_incarnation(1);
    RETURN_IF_ERROR(client.Push(id, r.dense_gradients, r.sparse_gradients));
    loss_avg = step == 0 ? r.loss : 0.98 * loss_avg + 0.02 * r.loss;
    if (loss_log != nullptr) std::fprintf(loss_log.get(), "%.7g\n", r.loss);
    window_examples += batch.size;
    if ((step + 1) % absl::GetFlag(FLAGS_report_every) == 0) {
      absl::Time now = absl::Now();
      std::printf("step %lld/%lld epoch %d loss %.4f examples/s %.0f elapsed %s\n", static_cast<long long>(step + 1),
                  static_cast<long long>(steps),
                  // the last batch of an epoch starts the next pass (see the chief's progress line)
                  job.steps() <= 0 && job.epochs() > 0 ? std::min(batch.epoch + 1, job.epochs()) : batch.epoch + 1,
                  loss_avg, window_examples / absl::ToDoubleSeconds(now - window),
                  absl::FormatDuration(absl::Trunc(now - start, absl::Seconds(1))).c_str());
      std::fflush(stdout);
      window = now;
      window_examples = 0;
    }
    if ((step + 1) % per_epoch == 0 && step + 1 < steps) RETURN_IF_ERROR(eval(step + 1));
  }
  const double wall = absl::ToDoubleSeconds(absl::Now() - start);
  RETURN_IF_ERROR(eval(steps));
  double eps = static_cast<double>(steps) * job.input().batch_size() / wall;
  std::printf("done: %lld steps in %.1f s (%.0f examples/s), test accuracy %.4f\n", static_cast<long long>(steps), wall,
              eps, last_eval["accuracy"]);
  std::string summary = absl::GetFlag(FLAGS_summary).empty() ? job.summary_path() : absl::GetFlag(FLAGS_summary);
  if (!summary.empty()) {
    std::ofstream(summary) << absl::StrFormat(
        "{\n  \"job\": \"%s\",\n  \"mode\": \"in-process\",\n  \"metrics\": {\"accuracy\": %f, \"loss\": %f},\n"
        "  \"steps\": %d,\n  \"wall_seconds\": %.2f,\n  \"examples_per_sec\": %.1f\n}\n",
        job.name(), last_eval["accuracy"], last_eval["loss"], steps, wall, eps);
    std::printf("summary: %s\n", summary.c_str());
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace psrt

int main(int argc, char** argv) {
  psrt::InitDaemon(argc, argv,
                   "In-process trainer: runs a job file with no cluster.\n"
                   "Usage: local_train --job=examples/fashion_mnist_mlp.pbtxt [--device=auto|cpu|gpu]",
                   {{__FILE__}, {}});
  absl::Status s = psrt::Train();
  if (!s.ok()) return psrt::ExitWithError(s);
  return 0;
}
