// The worker daemon.
//
//   bazel run //worker:main -- --cluster_spec=FILE --task=worker:0 [--device=auto|cpu|gpu]
//   (or TF_CONFIG)
//
// Registers with the chief, waits for its assignment, then runs the pull /
// compute / push loop against the parameter servers. SIGTERM, SIGINT or the
// chief's Shutdown stops it.
//
// For a mirrored strategy the worker holds a full replica of the variables
// in a parameter store of its own, served to the chief on the same port as
// the Worker service (CreateVariables, Snapshot, Restore, Status), and sums
// gradients with its group over TCP on a second, collective port that it
// reports to the chief when it registers (--collective_port).
#include <atomic>
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/transport/chief_client.h"
#include "common/daemon.h"
#include "common/env.h"
#include "common/job_identity.h"
#include "common/rpc/channel_cache.h"
#include "common/metrics/metrics_http.h"
#include "common/rpc/serve.h"
#include "glog/logging.h"
#include "grpcpp/grpcpp.h"
#include "common/collective/nccl_local_collective.h"
#include "common/collective/tcp_ring.h"
#include "common/store/ps_service.h"
#include "common/store/server_core.h"
#include "common/transport/ps_client.h"
#include "worker/device_select.h"
#include "worker/mirrored_client.h"
#include "common/compute/clipping_step_runner.h"
#include "common/compute/gradient_clipping.h"
#include "common/compute/graph_step_runner.h"
#include "common/compute/mirrored_devices_runner.h"
#include "worker/worker_metrics.h"
#include "worker/worker_runtime.h"
#include "worker/worker_service.h"

ABSL_FLAG(bool, overlap_pull, true,
          "ASYNC jobs: read the next batch and pull its parameters while this step computes "
          "(the pull then misses this worker's own last push: one step of staleness).");
ABSL_FLAG(bool, overlap_push, false,
          "ASYNC jobs: push this step's gradients while the next step reads, pulls and computes "
          "(one push in flight, in step order; a failed one takes the worker back to its step). "
          "Pays where pushes wait on the network and cores are spare; slower on a machine whose "
          "cores are all busy.");
ABSL_FLAG(int64_t, push_bucket_bytes, 0,
          "Push the step's gradients in parts (buckets) of about this many bytes per PS as the backward "
          "pass makes them, last layers first, while it makes the rest (0 = one push per PS after the "
          "backward pass). Not with --overlap_push nor mirrored strategies. See "
          "tests/bench/PS_BENCH_RESULTS.md for what it gave.");
ABSL_FLAG(std::string, device, "auto", "auto, cpu or gpu: where the step's kernels run.");
ABSL_FLAG(std::string, ps_transport, "tcp",
          "How pushes and pulls travel to each PS: tcp (frames of one TCP connection per PS, on the data port "
          "the PS offers; over its gRPC stream where it offers none, as under TLS), stream (frames of one "
          "ParameterServer/Exchange gRPC stream per PS, up to 1 MiB; larger ones unary) or unary (one gRPC "
          "call each). For comparison; the answers are the same.");
ABSL_FLAG(std::string, listen, "", "Address to listen on (default: this task's address in the spec).");
ABSL_FLAG(int, threads, 0, "Kernel threads (0 = one per core).");
ABSL_FLAG(bool, allow_plaintext_collective, false,
          "Under TLS, take a mirrored job's ring all-reduce anyway: its gradients travel unencrypted "
          "(authenticated by the token's MAC only). Without it such an assignment is refused, saying so.");
ABSL_FLAG(int, collective_port, 0,
          "Mirrored strategies: the TCP port this worker's ring neighbour connects to "
          "(0 = any free port; it is reported to the chief when the worker registers).");
ABSL_FLAG(std::string, snapshot_dir, "",
          "Mirrored strategies: directory of the replica's snapshots, kept in "
          "DIR/CHECKPOINT/worker-N (give the directory above the chief's --checkpoint_dir). "
          "Empty: ./psrt_snapshots under the working directory.");
ABSL_FLAG(int64_t, max_memory_mb, -1,
          "Mirrored strategies: most MiB of variables and optimizer slots the replica holds "
          "(-1 = 3/4 of the machine's memory, 0 = no limit).");
ABSL_FLAG(int64_t, kill_at_step, 0,
          "Fault injection: SIGKILL this worker when it is about to run this step (0 = never).");
ABSL_FLAG(std::string, data_log, "",
          "Tests: append \"generation step stream batch unix_ms\" for every step pushed (\"\" = none).");
ABSL_FLAG(int64_t, fault_stop_before_push_at_step, 0,
          "Fault injection for tests: SIGSTOP this worker with that step's gradients computed, "
          "just before pushing them (0 = never).");

namespace psrt {
namespace {

int Main(int argc, char** argv) {
  BlockTerminationSignals();
  InitDaemon(argc, argv,
             "Worker: pulls parameters, computes gradients on its data shard, pushes them.\n"
             "Usage: main --cluster_spec=FILE --task=worker:N [--device=auto|cpu|gpu]",
             {{__FILE__, DaemonFlagsFile(), HttpFlagsFile()}, {}});
  absl::StatusOr<TaskConfig> config = TaskConfigFromFlags();
  if (!config.ok()) return ExitWithError(config.status());
  if (config->task.job() != kWorkerJob) {
    return ExitWithError(absl::InvalidArgumentError(absl::StrCat("--task=", TaskName(config->task), ": this is the worker daemon")));
  }
  absl::StatusOr<HttpFlags> http_flags = HttpFlagsFromFlags();
  if (!http_flags.ok()) return ExitWithError(http_flags.status());
  absl::StatusOr<DeviceChoice> device = ChooseDevice(absl::GetFlag(FLAGS_device));
  if (!device.ok()) return ExitWithError(device.status());
  absl::StatusOr<PsTransport> transport_flag = ParsePsTransport(absl::GetFlag(FLAGS_ps_transport));
  if (!transport_flag.ok()) return ExitWithError(absl::InvalidArgumentError(
      absl::StrCat("--ps_transport: ", transport_flag.status().message())));
  const PsTransport ps_transport = *transport_flag;

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
  // A mirrored strategy's collective port, bound before registering so the
  // chief can tell every member where its neighbour listens.
  // It binds where the gRPC server does: a loopback or numeric address as
  // given, a host name on every interface.
  std::string collective_host = config->address.substr(0, config->address.rfind(':'));
  if (collective_host == "localhost") collective_host = "127.0.0.1";
  const std::string listen_host = ListenAddressFor(collective_host + ":0");
  absl::StatusOr<std::unique_ptr<CollectiveListener>> collective_listener = CollectiveListener::Bind(
      listen_host.substr(0, listen_host.rfind(':')) == "0.0.0.0" ? "" : collective_host,
      absl::GetFlag(FLAGS_collective_port));
  if (!collective_listener.ok()) return ExitWithError(collective_listener.status());
  self.set_collective_address(absl::StrCat(collective_host, ":", (*collective_listener)->port()));
  ChiefLink link(channels.Get(chief), chief, self, ChiefLinkOptions());

  // The replica of a mirrored strategy (idle otherwise).
  ServerCoreOptions replica_options;
  replica_options.task_index = config->task.index();
  replica_options.incarnation = incarnation;
  replica_options.store_name = absl::StrCat("worker-", config->task.index());
  replica_options.reads_see_whole_steps = true;  // replicas are compared bit for bit
  replica_options.snapshot_root = SnapshotRootFor(absl::GetFlag(FLAGS_snapshot_dir), replica_options.store_name);
  int64_t max_memory_mb = absl::GetFlag(FLAGS_max_memory_mb);
  if (max_memory_mb < 0) {
    max_memory_mb = static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGE_SIZE) / 4 * 3 >> 20;
  }
  if (max_memory_mb > 0) replica_options.max_memory_bytes = max_memory_mb << 20;
  ParameterServerCore replica(replica_options);
  PsServiceImpl replica_service(&replica);
  replica_service.set_authenticator(RequestAuthenticator(rpc.security));

  std::vector<std::string> ps_addresses;
  for (int i = 0; i < config->cluster.NumTasks(kPsJob); ++i) {
    ps_addresses.push_back(*config->cluster.AddressOf(MakeTaskId(kPsJob, i)));
  }
  const int index = config->task.index();
  const int threads = absl::GetFlag(FLAGS_threads);
  // Every pull, push and step's compute is counted for /metrics (worker_metrics.h).
  auto metrics = std::make_shared<WorkerMetrics>();
  WorkerDeps deps;
  auto make_client = [&](const WorkerAssignment& a) -> absl::StatusOr<std::unique_ptr<ParameterClient>> {
    if (a.has_collective()) {
      TcpRingOptions o;
      o.rank = a.collective().rank();
      o.size = a.collective().size();
      o.peers.assign(a.collective().peer().begin(), a.collective().peer().end());
      o.group_id = a.collective().group_id();
      o.token = rpc.security.token;
      if (a.collective().timeout_ms() > 0) o.timeout = absl::Milliseconds(a.collective().timeout_ms());
      CollectiveListener* listener = collective_listener->get();
      // Hybrid: the embedding tables placed on PS tasks (the replica is
      // store index num_ps) are pulled and pushed there.
      PlacementMap on_ps;
      for (const VariablePlacement& vp : a.placement().variable()) {
        if (vp.shard(0).ps_task() < static_cast<int>(ps_addresses.size())) *on_ps.add_variable() = vp;
      }
      std::unique_ptr<ParameterClient> embeddings;
      if (on_ps.variable_size() > 0) {
        PsClientOptions po;
        po.transport = ps_transport;
        po.worker = index;
        embeddings = std::make_unique<PsClient>(on_ps, ps_addresses, &channels, po);
      }
      return std::unique_ptr<ParameterClient>(new MirroredClient(
          &replica,
          [listener, o]() -> absl::StatusOr<std::unique_ptr<Collective>> {
            const absl::Time start = absl::Now();
            absl::StatusOr<std::unique_ptr<TcpRingCollective>> ring = TcpRingCollective::Create(listener, o);
            if (!ring.ok()) return ring.status();
            LOG(INFO) << "collective group " << o.group_id << " formed: rank " << o.rank << " of " << o.size
                      << " in " << absl::FormatDuration(absl::Now() - start);
            return std::unique_ptr<Collective>(std::move(*ring));
          },
          std::move(embeddings)));
    }
    PsClientOptions o;
    o.transport = ps_transport;
    o.worker = index;
    auto client = std::make_unique<PsClient>(a.placement(), PsAddresses(a, ps_addresses), &channels, o);
    if (a.route().epoch() > 0) client->SetRoute(a.route());  // replicated shards: where each store is now
    return std::unique_ptr<ParameterClient>(std::move(client));
  };
  deps.make_client = [&, make_client](const WorkerAssignment& a) -> absl::StatusOr<std::unique_ptr<ParameterClient>> {
    absl::StatusOr<std::unique_ptr<ParameterClient>> c = make_client(a);
    if (!c.ok()) return c.status();
    RecordAssignment(*metrics, a);
    return MeterClient(*std::move(c), metrics);
  };
  auto make_runner = [threads, device = *device](const WorkerAssignment& a) -> absl::StatusOr<std::unique_ptr<StepRunner>> {
    const int devices = std::max(1, a.local_devices());
    // Device replicas share the kernel threads: one each at least.
    const int cores = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const int per_device = devices > 1 ? std::max(1, cores / devices) : threads;
    const MirroredLayout layout = LayoutMirrored(device, devices);
    auto make_device = [&a, per_device, device, layout](int d) -> absl::StatusOr<std::unique_ptr<StepRunner>> {
      absl::StatusOr<std::unique_ptr<GraphStepRunner>> r =
          GraphStepRunner::Create(a, per_device, ExecutorFactoryFor(device, layout.ordinal[d]));
      if (!r.ok()) return r.status();
      return std::unique_ptr<StepRunner>(std::move(*r));
    };
    if (devices == 1) return make_device(0);
    LOG(INFO) << "mirrored devices: " << layout.why;
    MirroredDevicesRunner::RanksFactory nccl;
    if (layout.nccl) nccl = [](int n) { return NcclLocalGroup::Create(n); };
    absl::StatusOr<std::unique_ptr<MirroredDevicesRunner>> r =
        MirroredDevicesRunner::Create(a, devices, make_device, nccl);
    if (!r.ok()) return r.status();
    return std::unique_ptr<StepRunner>(std::move(*r));
  };
  deps.make_runner = [make_runner, metrics](const WorkerAssignment& a) -> absl::StatusOr<std::unique_ptr<StepRunner>> {
    absl::StatusOr<std::unique_ptr<StepRunner>> r = make_runner(a);
    if (!r.ok()) return r.status();
    // Gradient clipping (none: no wrapper) around the worker's whole
    // runner: under mirrored{devices}, after the devices' local reduce.
    if (ClippingEnabled(a.clip())) LOG(INFO) << "clipping gradients: " << a.clip().ShortDebugString();
    return MeterRunner(MaybeClipGradients(*std::move(r), a), metrics);
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
  wo.overlap_push = absl::GetFlag(FLAGS_overlap_push);
  if (absl::GetFlag(FLAGS_push_bucket_bytes) < 0) {
    LOG(ERROR) << "--push_bucket_bytes must be 0 or more, not " << absl::GetFlag(FLAGS_push_bucket_bytes);
    return 2;
  }
  wo.push_bucket_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_push_bucket_bytes));
  wo.data_log = absl::GetFlag(FLAGS_data_log);
  WorkerRuntime runtime(wo, deps);
  absl::Notification stop;
  WorkerServiceImpl service(&runtime, [&stop] {
    if (!stop.HasBeenNotified()) stop.Notify();
  });

  std::string listen = absl::GetFlag(FLAGS_listen);
  if (listen.empty()) listen = ListenAddressFor(config->address);
  AssignmentLimits limits;
  limits.num_ps = static_cast<int>(ps_addresses.size());
  // CPU device replicas beyond the cores only cost memory (an executor
  // each): a Start may not ask for more.
  limits.max_local_devices = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  limits.refuse_plaintext_collective = rpc.security.tls() && !absl::GetFlag(FLAGS_allow_plaintext_collective);
  if (rpc.security.tls() && absl::GetFlag(FLAGS_allow_plaintext_collective)) {
    LOG(WARNING) << "--allow_plaintext_collective under TLS: a mirrored job's ring all-reduce sends gradients "
                    "unencrypted (authenticated only)";
  }
  service.set_assignment_limits(limits);
  service.set_authenticator(RequestAuthenticator(rpc.security));
  absl::StatusOr<std::unique_ptr<grpc::Server>> server = StartServer(listen, rpc, {&service, &replica_service});
  if (!server.ok()) return ExitWithError(server.status());
  LOG(INFO) << TaskName(config->task) << " serving at " << listen << " (incarnation " << std::hex
            << incarnation << std::dec << ")";
  // /metrics (--http_port): this worker's steps, pulls, pushes and compute.
  std::unique_ptr<HttpServer> http;
  if (http_flags->port > 0) {
    const MetricLabels task = {{"task", TaskName(config->task)}};
    absl::StatusOr<std::unique_ptr<HttpServer>> h =
        ServeMetrics(*http_flags, [&runtime, metrics, task] { return WorkerMetricsText(*metrics, runtime.Status(), task); },
                     absl::StrCat("psrt worker ", TaskName(config->task)));
    if (!h.ok()) {
      (*server)->Shutdown(std::chrono::system_clock::now());
      return ExitWithError(h.status());
    }
    http = *std::move(h);
    std::cout << TaskName(config->task) << ": metrics " << HttpBaseUrl(http_flags->host, http->port()) << "/metrics"
              << (http_flags->token.empty() ? "" : " (token required)") << std::endl;
  }
  link.set_progress([&runtime] { return runtime.progress(); });
  link.set_on_chief_lost([&runtime] { runtime.Park("the chief does not answer; waiting for it"); });
  link.set_job_identity(MakeJobIdentity(config->job_name, config->cluster));
  // Another job's chief: stop, then exit with its error.
  link.set_on_refused([&stop](const absl::Status&) {
    if (!stop.HasBeenNotified()) stop.Notify();
  });
  link.Start();

  std::atomic<bool> signalled{false};
  std::thread signals([&stop, &signalled] {
    int sig = WaitForTerminationSignal();
    LOG(INFO) << "signal " << sig;
    signalled = true;
    if (!stop.HasBeenNotified()) stop.Notify();
  });
  signals.detach();
  stop.WaitForNotification();
  if (absl::Status refused = link.refused(); !refused.ok()) {
    (*server)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    runtime.Shutdown();
    link.Stop();
    return ExitWithError(refused);
  }
  LOG(INFO) << "stopping";
  // Stopped by its operator (SIGTERM: an orchestrator scaling down) while
  // training: the worker leaves the job for good, telling the chief the
  // first step it did not push, so its data goes on from there with the
  // others. No Start or Resume may reach it meanwhile: the server goes
  // first, then the loop, and the step is read after the last push.
  const WorkerStatusResponse::State state = runtime.Status().state();
  const bool leave = signalled && (state == WorkerStatusResponse::RUNNING || state == WorkerStatusResponse::PAUSED);
  if (http != nullptr) http->Stop();
  (*server)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  runtime.Shutdown();
  link.Stop();
  if (leave) {
    HeartbeatRequest beat;
    *beat.mutable_task() = config->task;
    beat.set_incarnation(incarnation);
    beat.set_step(runtime.Status().step());
    beat.set_leaving(true);
    absl::StatusOr<HeartbeatResponse> r = link.client()->Heartbeat(beat);
    LOG(INFO) << "leaving the job before step " << beat.step() << ": "
              << (r.ok() ? "the chief knows" : std::string(r.status().message()));
  }
  LOG(INFO) << "stopped";
  return 0;
}

}  // namespace
}  // namespace psrt

int main(int argc, char** argv) { return psrt::Main(argc, argv); }
