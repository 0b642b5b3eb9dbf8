// The parameter-server daemon.
//
//   bazel run //ps:server -- --cluster_spec=FILE --task=ps:0
//   (or TF_CONFIG='{"cluster": {...}, "task": {"type": "ps", "index": 0}}')
//
// Serves the ParameterServer service at its address from the spec and
// registers with the chief in the background; it serves workers whether or
// not the chief is up. SIGTERM or SIGINT drains and stops it.
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <iostream>
#include <memory>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/transport/chief_client.h"
#include "common/daemon.h"
#include "common/env.h"
#include "common/job_identity.h"
#include "common/rpc/channel_cache.h"
#include "common/metrics/metrics_http.h"
#include "common/rpc/serve.h"
#include "glog/logging.h"
#include "grpcpp/grpcpp.h"
#include "common/store/ps_metrics.h"
#include "common/store/ps_service.h"
#include "common/store/ps_tcp_server.h"
#include "common/store/replica_router.h"
#include "common/store/server_core.h"

ABSL_FLAG(std::string, listen, "",
          "Address to listen on (default: this task's address in the spec; a host name there "
          "means every interface on its port).");
ABSL_FLAG(int64_t, max_request_mb, 1024, "Largest request accepted, in MiB (RESOURCE_EXHAUSTED above).");
ABSL_FLAG(int64_t, max_rows_per_request, 1 << 22, "Most rows in one PullRows or PushRows request.");
ABSL_FLAG(int64_t, max_inflight_requests, 4096,
          "Most pulls, and most pushes, served at once (parked SYNC pulls included); more are "
          "refused with RESOURCE_EXHAUSTED.");
ABSL_FLAG(int64_t, max_unread_answer_mb, 1024,
          "Bytes (MiB) of pull answers one caller may have that it has not read yet; a pull whose answer "
          "would pass it is refused with RESOURCE_EXHAUSTED (a caller with none unread always gets one).");
ABSL_FLAG(int64_t, max_unread_answers_total_mb, 2048,
          "Bytes (MiB) of pull answers every caller together may have that they have not read yet; past it "
          "a pull of a caller with some unread is refused with RESOURCE_EXHAUSTED (a caller with none unread "
          "always gets one). Each TCP data-plane connection is a caller of its own, so this, not "
          "--max_unread_answer_mb, bounds what many connections of one token can leave unread.");
ABSL_FLAG(int64_t, max_inflight_per_caller, 1024,
          "Most pulls, and most pushes, one caller (its certificate's task, else its token and "
          "connection; never the worker id a request names) may have in flight at once, answers not "
          "yet written included; more are refused with RESOURCE_EXHAUSTED while other callers are "
          "still served.");
ABSL_FLAG(int64_t, exchange_write_timeout_s, 30,
          "An Exchange stream (the gRPC data path) that stopped being read because its caller left 64 answers "
          "unread is ended once no answer is written for this many seconds (0 = never).");
ABSL_FLAG(int64_t, max_pull_response_mb, 1024,
          "Largest answer one Pull or PullRows may make, in MiB; a bigger one is refused with "
          "RESOURCE_EXHAUSTED before anything is copied.");
ABSL_FLAG(int64_t, max_variables, 100000, "Most variables (and partitions) this PS holds.");
ABSL_FLAG(int64_t, max_memory_mb, -1,
          "Most MiB of variables and optimizer slots this PS holds (-1 = three quarters of this "
          "machine's memory, 0 = no limit).");
ABSL_FLAG(int64_t, max_hash_table_rows, 0,
          "Most rows one hash embedding table may make on first touch (0 = as many as "
          "--max_memory_mb holds).");
ABSL_FLAG(std::string, snapshot_dir, "",
          "Directory of this PS's snapshots: the chief's checkpoint NAME (the last component of "
          "its --checkpoint_dir) is kept in DIR/NAME/ps-N, so give the directory above the "
          "chief's --checkpoint_dir. Requests name checkpoints, never paths. Empty: "
          "./psrt_snapshots under the working directory (logged).");
ABSL_FLAG(int64_t, leave_wait_ms, 60000,
          "On SIGTERM while it holds variables of a job that lets PS leave (job.failure.max_ps): how long "
          "the PS serves on while the chief moves its variables to the others before it exits (it exits "
          "as soon as they are moved; at once when the chief refuses). 0: exit at once.");
ABSL_FLAG(std::string, tcp_data_plane, "auto",
          "Serve pushes and pulls on a plain TCP port too (common/transport/tcp_frame.h), which workers "
          "use in place of gRPC (--ps_transport=tcp, their default): on, off, or auto (on unless --tls_* is "
          "set: the TCP data plane is authenticated, by a ticket from the gRPC service, but not encrypted).");
ABSL_FLAG(bool, allow_plaintext_data_plane, false,
          "With --tcp_data_plane=on under TLS: yes, send tensors over the data plane unencrypted (the PS "
          "refuses to start without it, since the rest of its traffic is encrypted).");
ABSL_FLAG(int, data_port, 0,
          "The TCP data plane's port (0 = any free port; workers learn it from the PS's gRPC service). Give a "
          "fixed one where a firewall must let it through.");
ABSL_FLAG(int64_t, max_data_plane_mb, 2048,
          "Most MiB of large requests (over 64 KiB) the TCP data plane holds at once, across every connection; "
          "a request that would pass it is refused with RESOURCE_EXHAUSTED before anything is allocated.");
ABSL_FLAG(int, max_unauthenticated_per_source, 64,
          "Most TCP data-plane connections one source address may hold before they present their ticket; "
          "more are refused at once (a line says so at most every 10 s). An admitted connection counts no "
          "more. 0: no limit.");
ABSL_FLAG(int, apply_threads, 0,
          "Threads that apply pushed gradients: the variables of one push, and row ranges of a "
          "large variable, are updated in parallel (0 = one per core, 1 = all on the thread that "
          "serves the push).");
ABSL_FLAG(int64_t, fault_pause_snapshot_after_chunks, 0,
          "Fault injection for tests: stall the background snapshot writer after this many "
          "chunks (logs a line, then waits to be killed).");
ABSL_FLAG(int, fault_pause_snapshot_number, 0,
          "With --fault_pause_snapshot_after_chunks: stall only the Nth snapshot this process "
          "writes (0 = the first that reaches that many chunks).");

namespace psrt {
namespace {

// The TCP data plane (--tcp_data_plane, --data_port, --max_data_plane_mb)
// on the host of `listen`, serving `service`; null when it is off.
absl::StatusOr<std::unique_ptr<PsTcpServer>> StartDataPlane(PsServiceImpl* service, const std::string& listen,
                                                            bool tls, int64_t max_request_bytes) {
  const std::string mode = absl::GetFlag(FLAGS_tcp_data_plane);
  if (mode != "auto" && mode != "on" && mode != "off") {
    return absl::InvalidArgumentError(absl::StrCat("--tcp_data_plane=", mode, ": want auto, on or off"));
  }
  const int port = absl::GetFlag(FLAGS_data_port);
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--data_port=", port, ": want 0 to 65535"));
  }
  const int64_t buffered_mb = absl::GetFlag(FLAGS_max_data_plane_mb);
  if (buffered_mb < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--max_data_plane_mb=", buffered_mb, ": want 1 or more"));
  }
  const int per_source = absl::GetFlag(FLAGS_max_unauthenticated_per_source);
  if (per_source < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_unauthenticated_per_source=", per_source, ": want 0 (no limit) or more"));
  }
  if (mode == "off") return nullptr;
  if (mode == "on" && tls && !absl::GetFlag(FLAGS_allow_plaintext_data_plane)) {
    return absl::InvalidArgumentError(
        "--tcp_data_plane=on under TLS would send every tensor unencrypted while the rest is encrypted: "
        "add --allow_plaintext_data_plane if that is meant, or leave --tcp_data_plane at auto (the gRPC "
        "stream, encrypted)");
  }
  if (mode == "auto" && tls) {
    LOG(INFO) << "no TCP data plane under TLS (it would not be encrypted): workers use the gRPC stream; "
                 "--tcp_data_plane=on offers it anyway";
    return nullptr;
  }
  PsTcpServerOptions t;
  std::string host = listen.substr(0, listen.rfind(':'));
  if (host == "0.0.0.0" || host == "[::]") host.clear();
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  t.host = host;
  t.port = port;
  t.max_request_bytes = static_cast<uint64_t>(max_request_bytes);
  t.max_buffered_bytes = static_cast<uint64_t>(buffered_mb) << 20;
  t.max_unauthenticated_per_source = per_source;
  absl::StatusOr<std::unique_ptr<PsTcpServer>> tcp = PsTcpServer::Start(service, t);
  if (tcp.ok()) service->set_tcp_server(tcp->get());
  return tcp;
}

int Main(int argc, char** argv) {
  BlockTerminationSignals();
  InitDaemon(argc, argv,
             "Parameter server: holds variables, applies the optimizer, snapshots to RocksDB.\n"
             "Usage: server --cluster_spec=FILE --task=ps:N   (or set TF_CONFIG)",
             {{__FILE__, DaemonFlagsFile(), HttpFlagsFile()}, {}});
  absl::StatusOr<TaskConfig> config = TaskConfigFromFlags();
  if (!config.ok()) return ExitWithError(config.status());
  if (config->task.job() != kPsJob) {
    return ExitWithError(absl::InvalidArgumentError(
        absl::StrCat("--task=", TaskName(config->task), ": this is the ps daemon")));
  }
  absl::StatusOr<HttpFlags> http_flags = HttpFlagsFromFlags();
  if (!http_flags.ok()) return ExitWithError(http_flags.status());
  const uint64_t incarnation = NewIncarnationId();
  ServerCoreOptions o;
  o.task_index = config->task.index();
  o.incarnation = incarnation;
  o.max_request_bytes = absl::GetFlag(FLAGS_max_request_mb) << 20;
  o.max_rows_per_request = absl::GetFlag(FLAGS_max_rows_per_request);
  o.max_variables = absl::GetFlag(FLAGS_max_variables);
  o.max_pull_response_bytes = absl::GetFlag(FLAGS_max_pull_response_mb) << 20;
  o.apply_threads = absl::GetFlag(FLAGS_apply_threads);
  if (o.apply_threads < 0 || o.apply_threads > 1024) {
    return ExitWithError(absl::InvalidArgumentError(
        absl::StrCat("--apply_threads=", o.apply_threads, ": want 0 (one per core) to 1024")));
  }
  // A PS with no flags must refuse a variable larger than the machine
  // rather than abort in the allocator (a float [2^40, 256] did).
  int64_t max_memory_mb = absl::GetFlag(FLAGS_max_memory_mb);
  if (max_memory_mb < 0) {
    max_memory_mb = static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGE_SIZE) / 4 * 3 >> 20;
  }
  if (max_memory_mb > 0) o.max_memory_bytes = max_memory_mb << 20;
  if (absl::GetFlag(FLAGS_max_hash_table_rows) > 0) o.max_hash_table_rows = absl::GetFlag(FLAGS_max_hash_table_rows);
  o.snapshot_root = SnapshotRootFor(absl::GetFlag(FLAGS_snapshot_dir), absl::StrCat("ps-", o.task_index));
  o.snapshot.fault_pause_after_chunks = absl::GetFlag(FLAGS_fault_pause_snapshot_after_chunks);
  o.snapshot.on_fault_pause = [number = absl::GetFlag(FLAGS_fault_pause_snapshot_number),
                               seen = 0]() mutable {
    if (number > 0 && ++seen != number) return;
    LOG(WARNING) << "fault injection: snapshot writer stalled";
    std::cerr << "FAULT: snapshot writer stalled" << std::endl;
    while (true) absl::SleepFor(absl::Hours(1));  // until SIGKILL
  };
  ParameterServerCore core(o);
  PsServiceImpl service(&core);

  std::string listen = absl::GetFlag(FLAGS_listen);
  if (listen.empty()) listen = ListenAddressFor(config->address);
  absl::StatusOr<RpcOptions> rpc_flags = RpcOptionsFromFlags();
  if (!rpc_flags.ok()) return ExitWithError(rpc_flags.status());
  RpcOptions rpc = *rpc_flags;
  rpc.max_message_bytes = static_cast<int>(std::min<int64_t>(o.max_request_bytes + (1 << 20), INT32_MAX));
  rpc.max_receive_message_bytes = rpc.max_message_bytes;  // --max_request_mb, not --max_receive_message_mb
  service.set_authenticator(RequestAuthenticator(rpc.security));
  service.set_max_inflight_requests(absl::GetFlag(FLAGS_max_inflight_requests));
  service.set_max_inflight_per_caller(absl::GetFlag(FLAGS_max_inflight_per_caller));
  if (absl::GetFlag(FLAGS_exchange_write_timeout_s) < 0) {
    return ExitWithError(absl::InvalidArgumentError(absl::StrCat(
        "--exchange_write_timeout_s=", absl::GetFlag(FLAGS_exchange_write_timeout_s), ": want 0 (never) or more")));
  }
  service.set_exchange_write_timeout(absl::Seconds(absl::GetFlag(FLAGS_exchange_write_timeout_s)));
  if (absl::GetFlag(FLAGS_max_unread_answer_mb) < 1) {
    return ExitWithError(absl::InvalidArgumentError(
        absl::StrCat("--max_unread_answer_mb=", absl::GetFlag(FLAGS_max_unread_answer_mb), ": want 1 or more")));
  }
  service.set_max_unread_answer_bytes(absl::GetFlag(FLAGS_max_unread_answer_mb) << 20);
  if (absl::GetFlag(FLAGS_max_unread_answers_total_mb) < 1) {
    return ExitWithError(absl::InvalidArgumentError(absl::StrCat(
        "--max_unread_answers_total_mb=", absl::GetFlag(FLAGS_max_unread_answers_total_mb), ": want 1 or more")));
  }
  service.set_max_unread_answer_total_bytes(absl::GetFlag(FLAGS_max_unread_answers_total_mb) << 20);
  // Replicated shards (job.replication): backups of other stores, and the
  // channels a primary forwards its pushes to its backup on.
  ChannelCache channels(rpc);
  ReplicaRouter router(&core, o, &channels);
  service.set_router(&router);
  auto metrics = std::make_shared<PsMetrics>();
  service.set_metrics(metrics);
  // The TCP data plane: the same calls, checks and core, without gRPC.
  absl::StatusOr<std::unique_ptr<PsTcpServer>> tcp_started =
      StartDataPlane(&service, listen, rpc.security.tls(), o.max_request_bytes);
  if (!tcp_started.ok()) return ExitWithError(tcp_started.status());
  std::unique_ptr<PsTcpServer> tcp = *std::move(tcp_started);
  absl::StatusOr<std::unique_ptr<grpc::Server>> server = StartServer(listen, rpc, {&service});
  if (!server.ok()) return ExitWithError(server.status());
  LOG(INFO) << TaskName(config->task) << " serving at " << listen << " (incarnation " << std::hex
            << incarnation << std::dec << ")"
            << (tcp != nullptr ? absl::StrCat(", TCP data plane on port ", tcp->port(),
                                              rpc.security.tls() ? " (NOT encrypted)" : "")
                               : std::string());

  // /metrics (--http_port): what this PS serves, as Prometheus scrapes it.
  std::unique_ptr<HttpServer> http;
  if (http_flags->port > 0) {
    const MetricLabels task = {{"task", TaskName(config->task)}};
    absl::StatusOr<std::unique_ptr<HttpServer>> h = ServeMetrics(
        *http_flags, [&core, &router, metrics, task] { return PsMetricsText(*metrics, core.Status(), router.Roles(), task); },
        absl::StrCat("psrt parameter server ", TaskName(config->task)));
    if (!h.ok()) {
      if (tcp != nullptr) tcp->Shutdown();
      (*server)->Shutdown(std::chrono::system_clock::now());
      return ExitWithError(h.status());
    }
    http = *std::move(h);
    std::cout << TaskName(config->task) << ": metrics " << HttpBaseUrl(http_flags->host, http->port()) << "/metrics"
              << (http_flags->token.empty() ? "" : " (token required)") << std::endl;
  }

  TaskInfo self;
  *self.mutable_task() = config->task;
  self.set_address(config->address);
  self.set_incarnation(incarnation);
  std::string chief = *config->cluster.AddressOf(MakeTaskId(kChiefJob, 0));
  ChiefLink link(channels.Get(chief), chief, self, ChiefLinkOptions());
  link.set_job_identity(MakeJobIdentity(config->job_name, config->cluster));
  // Another job's chief: stop as if signalled, then exit with its error.
  link.set_on_refused([](const absl::Status&) { ::kill(::getpid(), SIGTERM); });
  link.Start();

  int sig = WaitForTerminationSignal();
  if (absl::Status refused = link.refused(); !refused.ok()) {
    link.Stop();
    if (tcp != nullptr) tcp->Shutdown();
    (*server)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    return ExitWithError(refused);
  }
  LOG(INFO) << "signal " << sig << ": draining";
  // Stopped by its operator (a scale-down) while it holds variables: it
  // leaves the job, serving until the chief has moved them all off.
  const int64_t leave_wait_ms = absl::GetFlag(FLAGS_leave_wait_ms);
  if (leave_wait_ms > 0 && core.Status().variables() > 0) {
    HeartbeatRequest beat;
    *beat.mutable_task() = config->task;
    beat.set_incarnation(incarnation);
    beat.set_leaving(true);
    absl::StatusOr<HeartbeatResponse> r = link.client()->Heartbeat(beat);
    if (!r.ok()) {
      LOG(INFO) << "not leaving the job (stopping with its variables): " << r.status().message();
    } else if (core.WaitHoldsNone(absl::Now() + absl::Milliseconds(leave_wait_ms))) {
      LOG(INFO) << "left the job: the chief moved every variable off this PS";
    } else {
      LOG(WARNING) << "the chief did not move this PS's variables off within --leave_wait_ms=" << leave_wait_ms
                   << ": stopping with them (the chief then waits for this PS as for a failed one)";
    }
  }
  link.Stop();
  if (http != nullptr) http->Stop();
  if (tcp != nullptr) tcp->Shutdown();
  (*server)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  LOG(INFO) << "stopped";
  return 0;
}

}  // namespace
}  // namespace psrt

int main(int argc, char** argv) { return psrt::Main(argc, argv); }
