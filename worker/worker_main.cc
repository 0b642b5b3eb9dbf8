// The worker daemon.
//
//   bazel run //worker:main -- --cluster_spec=FILE --task=worker:0 [--device=auto|cpu|gpu]
//   (or TF_CONFIG)
//
// Registers with the chief, waits for its assignment, then runs the pull /
// compute / push loop against the parameter servers. SIGTERM, SIGINT or the
// chief's Shutdown stops it.
#include <iostream>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/transport/chief_client.h"
#include "common/daemon.h"
#include "common/env.h"
#include "common/rpc/channel_cache.h"
#include "common/rpc/serve.h"
#include "glog/logging.h"
#include "grpcpp/grpcpp.h"
#include "common/transport/ps_client.h"
#include "worker/device_select.h"
#include "common/compute/graph_step_runner.h"
#include "worker/worker_runtime.h"
#include "worker/worker_service.h"

ABSL_FLAG(bool, overlap_pull, true,
          "ASYNC jobs: read the next batch and pull its parameters while this step computes "
          "(the pull then misses this worker's own last push: one step of staleness).");
ABSL_FLAG(std::string, device, "auto", "auto, cpu or gpu: where the step's kernels run.");
ABSL_FLAG(std::string, listen, "", "Address to listen on (default: this task's address in the spec).");
ABSL_FLAG(int, threads, 0, "Kernel threads (0 = one per core).");
ABSL_FLAG(int64_t, kill_at_step, 0,
          "Fault injection: SIGKILL this worker when it is about to run this step (0 = never).");
ABSL_FLAG(int64_t, fault_stop_before_push_at_step, 0,
          "Fault injection for tests: SIGSTOP this worker with that step's gradients computed, "
          "just before pushing them (0 = never).");

namespace psrt {
namespace {

int Main(int argc, char** argv) {
  BlockTerminationSignals();
  InitDaemon(argc, argv,
             "Worker: pulls parameters, computes gradients on its data shard, pushes them.\n"
             "Usage: main --cluster_spec=FILE --task=worker:N [--device=auto|cpu|gpu]");
  absl::StatusOr<TaskConfig> config = TaskConfigFromFlags();
  if (!config.ok()) return ExitWithError(config.status());
  if (config->task.job() != kWorkerJob) {
    return ExitWithError(absl::InvalidArgumentError(absl::StrCat("--task=", TaskName(config->task), ": this is the worker daemon")));
  }
  absl::StatusOr<DeviceChoice> device = ChooseDevice(absl::GetFlag(FLAGS_device));
  if (!device.ok()) return ExitWithError(device.status());

  const uint64_t incarnation = NewIncarnationId();
  absl::StatusOr<RpcOptions> rpc_flags = RpcOptionsFromFlags();
  if (!rpc_flags.ok()) return ExitWithError(rpc_flags.status());
  RpcOptions rpc = *rpc_flags;
  ChannelCache channels(rpc);
  std::string chief = *config->cluster.AddressOf(MakeTaskId(kChiefJob, 0));
  TaskInfo self;
  *self.mutable_task() = config->task;
  self.set_address(config->address);
  self.set_incarnation(incarnation);
  ChiefLink link(channels.Get(chief), chief, self, ChiefLinkOptions());

  std::vector<std::string> ps_addresses;
  for (int i = 0; i < config->cluster.NumTasks(kPsJob); ++i) {
    ps_addresses.push_back(*config->cluster.AddressOf(MakeTaskId(kPsJob, i)));
  }
  const int index = config->task.index();
  const int threads = absl::GetFlag(FLAGS_threads);
  WorkerDeps deps;
  deps.make_client = [&](const WorkerAssignment& a) -> absl::StatusOr<std::unique_ptr<ParameterClient>> {
    PsClientOptions o;
    o.worker = index;
    return std::unique_ptr<ParameterClient>(new PsClient(a.placement(), ps_addresses, &channels, o));
  };
  deps.make_runner = [threads, device = *device](const WorkerAssignment& a) -> absl::StatusOr<std::unique_ptr<StepRunner>> {
    absl::StatusOr<std::unique_ptr<GraphStepRunner>> r = GraphStepRunner::Create(a, threads, ExecutorFactoryFor(device));
    if (!r.ok()) return r.status();
    return std::unique_ptr<StepRunner>(std::move(*r));
  };
  deps.report_failure = [&](const absl::Status& s, int64_t step) {
    ReportFailureRequest req;
    *req.mutable_reporter() = config->task;
    req.set_reporter_incarnation(incarnation);
    req.set_error(std::string(s.message()));
    req.set_step(step);
    absl::Status r = link.client()->ReportFailure(req);
    if (!r.ok()) LOG(WARNING) << "could not report to the chief: " << r;
  };
  WorkerOptions wo;
  wo.index = index;
  wo.incarnation = incarnation;
  wo.kill_at_step = absl::GetFlag(FLAGS_kill_at_step);
  wo.stop_before_push_at_step = absl::GetFlag(FLAGS_fault_stop_before_push_at_step);
  wo.overlap_pull = absl::GetFlag(FLAGS_overlap_pull);
  WorkerRuntime runtime(wo, deps);
  absl::Notification stop;
  WorkerServiceImpl service(&runtime, [&stop] {
    if (!stop.HasBeenNotified()) stop.Notify();
  });

  std::string listen = absl::GetFlag(FLAGS_listen);
  if (listen.empty()) listen = ListenAddressFor(config->address);
  AssignmentLimits limits;
  limits.num_ps = static_cast<int>(ps_addresses.size());
  service.set_assignment_limits(limits);
  service.set_authenticator(RequestAuthenticator(rpc.security));
  absl::StatusOr<std::unique_ptr<grpc::Server>> server = StartServer(listen, rpc, {&service});
  if (!server.ok()) return ExitWithError(server.status());
  LOG(INFO) << TaskName(config->task) << " serving at " << listen << " (incarnation " << std::hex
            << incarnation << std::dec << ")";
  link.set_progress([&runtime] { return runtime.progress(); });
  link.set_on_chief_lost([&runtime] { runtime.Park("the chief does not answer; waiting for it"); });
  link.Start();

  std::thread signals([&stop] {
    int sig = WaitForTerminationSignal();
    LOG(INFO) << "signal " << sig;
    if (!stop.HasBeenNotified()) stop.Notify();
  });
  signals.detach();
  stop.WaitForNotification();
  LOG(INFO) << "stopping";
  link.Stop();
  runtime.Shutdown();
  (*server)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  LOG(INFO) << "stopped";
  return 0;
}

}  // namespace
}  // namespace psrt

int main(int argc, char** argv) { return psrt::Main(argc, argv); }
