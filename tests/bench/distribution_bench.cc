// The cost of distribution: the MLP example's step through a real gRPC
// parameter server on loopback, beside the same step against an in-process
// one, in the same run; the step over two PS with replicated shards
// (job.replication.factor 2) beside the same two PS without; and the input
// pipeline's examples/s per format. Each step line also gives the CPU time
// per step of the whole process (getrusage: the worker's compute and
// client, and the PS's service and apply, which run in this process too), so
// the cost shows apart from the contention on a machine of few cores. The
// bucketed push (worker --push_bucket_bytes) is measured against the whole
// push in the same run, alternated.
//
//   bazel run //tests/bench:distribution_bench -- [--steps=300]
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/synchronization/mutex.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/optimizer.h"
#include "common/plan/job_planner.h"
#include "common/io/record_io.h"
#include "common/rpc/channel_cache.h"
#include "grpcpp/grpcpp.h"
#include "proto/example.pb.h"
#include "common/store/local_ps_client.h"
#include "common/transport/ps_client.h"
#include "common/plan/placement.h"
#include "common/store/ps_service.h"
#include "common/store/ps_tcp_server.h"
#include "common/store/replica_router.h"
#include "common/compute/graph_step_runner.h"
#include "common/input/dataset.h"
#include "worker/worker_runtime.h"

ABSL_FLAG(int, steps, 300, "Training steps per measurement.");
ABSL_FLAG(int, loop_threads, 1, "Compute threads of the worker-loop measurement (the PS shares the machine).");
ABSL_FLAG(std::string, job, "examples/fashion_mnist_mlp.pbtxt", "Job file.");
ABSL_FLAG(int64_t, bucket_bytes, 64 << 10, "Bucket size of the bucketed-push lines (per PS).");

namespace psrt {
namespace {

void Check(const absl::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
    std::exit(1);
  }
}
template <typename T>
T Check(absl::StatusOr<T> s) {
  Check(s.status());
  return *std::move(s);
}

// Wall and CPU seconds per step.
struct Timing {
  double wall = 0, cpu = 0;
};

double CpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// Times `steps` calls of `run` (after `warm_up` more).
template <typename Run>
Timing Measure(int steps, Run run) {
  const absl::Time start = absl::Now();
  const double cpu = CpuSeconds();
  run();
  return {absl::ToDoubleSeconds(absl::Now() - start) / steps, (CpuSeconds() - cpu) / steps};
}

// A server's shutdown ends the clients' open streams (ps_stream.h) at this
// deadline rather than waiting for them forever.
std::chrono::system_clock::time_point ShutdownDeadline() {
  return std::chrono::system_clock::now() + std::chrono::seconds(2);
}

// The mean of two measurements.
Timing Mean(const Timing& a, const Timing& b) { return {(a.wall + b.wall) / 2, (a.cpu + b.cpu) / 2}; }

// Per step of `steps` training steps through `client`; with `bucket_bytes`
// > 0 the gradients leave in buckets during the backward pass.
Timing StepTime(ParameterClient* client, GraphStepRunner* runner, Dataset* data, int steps,
                size_t bucket_bytes = 0) {
  // Distinct ids for every call of this function on the same PS.
  static int64_t next_step = 0;
  auto step = [&](int64_t i) {
    Batch b;
    Check(data->Next(&b).status());
    TensorMap dense = Check(client->Pull(runner->DenseVariables(), i));
    RequestId id;
    id.set_step(i);
    id.set_worker_incarnation(1);
    std::unique_ptr<BucketedPush> parts = bucket_bytes > 0 ? client->StartBucketedPush(id, bucket_bytes) : nullptr;
    if (parts != nullptr) {
      StepResult r = Check(runner->RunStreaming(dense, {}, b, i, [&](const std::string& v, const Tensor& g) {
        parts->Add(v, g);
      }));
      Check(parts->Finish({}));
      return;
    }
    StepResult r = Check(runner->Run(dense, {}, b, i));
    Check(client->Push(id, r.dense_gradients, {}));
  };
  for (int i = 0; i < 20; ++i) step(next_step++);  // warm up
  return Measure(steps, [&] {
    for (int i = 0; i < steps; ++i) step(next_step++);
  });
}

// Seconds per step of the worker's own loop (WorkerRuntime: read, pull,
// compute, push) against the PS at `address`, with the next step's read and
// pull overlapping this compute or not. Also the test accuracy after it.
Timing LoopStepTime(const WorkerAssignment& base, const std::string& address, bool overlap, int steps,
                    size_t bucket_bytes = 0, bool overlap_push = false) {
  ChannelCache channels;
  WorkerDeps deps;
  deps.make_client = [&](const WorkerAssignment& a) -> absl::StatusOr<std::unique_ptr<ParameterClient>> {
    return std::unique_ptr<ParameterClient>(new PsClient(a.placement(), {address}, &channels, PsClientOptions()));
  };
  deps.make_runner = [](const WorkerAssignment& a) -> absl::StatusOr<std::unique_ptr<StepRunner>> {
    absl::StatusOr<std::unique_ptr<GraphStepRunner>> r = GraphStepRunner::Create(a, absl::GetFlag(FLAGS_loop_threads));
    if (!r.ok()) return r.status();
    return std::unique_ptr<StepRunner>(std::move(*r));
  };
  WorkerOptions o;
  o.overlap_pull = overlap;
  o.overlap_push = overlap_push;
  o.push_bucket_bytes = bucket_bytes;
  // A new incarnation per run: each starts again from step 0 on this PS.
  static uint64_t incarnation = 1000;  // StepTime's pushes are incarnation 1
  o.incarnation = incarnation++;
  WorkerRuntime worker(o, deps);
  WorkerAssignment a = base;
  a.set_start_step(0);
  a.set_end_step(20);  // warm up
  // Generation 0, the PS's (no chief moved it): a PS refuses pushes of
  // another generation, and the worker would park on the first one.
  a.set_generation(0);
  Check(worker.Start(a));
  worker.WaitFinished(absl::Minutes(5));
  a.set_start_step(20);
  a.set_end_step(20 + steps);
  return Measure(steps, [&] {
    Check(worker.Start(a));
    if (worker.WaitFinished(absl::Minutes(10)) != WorkerStatusResponse::DONE) {
      Check(absl::InternalError(worker.Status().error()));
    }
  });
}

// The job's optimizer with its schedule's length filled in, as the chief
// does (the MLP example decays its learning rate over the job).
OptimizerDef BenchOptimizer(const TrainingJob& job) { return ResolveSchedule(job.optimizer(), 100000); }

CreateVariablesRequest Create(const TrainingJob& job, const JobPlan& plan) {
  CreateVariablesRequest req;
  for (const VariablePlacement& vp : plan.placement.variable()) *req.add_variable() = vp.variable();
  *req.mutable_optimizer() = BenchOptimizer(job);
  req.set_num_workers(1);
  return req;
}

// The TCP data plane of `service` on loopback (as ps/server_main.cc starts it).
std::unique_ptr<PsTcpServer> TcpDataPlane(PsServiceImpl* service) {
  PsTcpServerOptions o;
  o.host = "127.0.0.1";
  std::unique_ptr<PsTcpServer> tcp = Check(PsTcpServer::Start(service, o));
  service->set_tcp_server(tcp.get());
  return tcp;
}

PsClientOptions Over(PsTransport t) {
  PsClientOptions o;
  o.transport = t;
  return o;
}

// Two PS on loopback (each a core, a replica router, its TCP data plane and a gRPC server), the
// plan's store s on PS s and, with `factor` 2, its backup on the other:
// the step time over them through the worker's client.
Timing TwoPsStepTime(const TrainingJob& job, int factor, GraphStepRunner* runner, Dataset* data, int steps,
                     size_t bucket_bytes = 0) {
  JobPlan plan = Check(PlanJob(job, 2));
  ChannelCache channels;
  std::unique_ptr<ParameterServerCore> cores[2];
  std::unique_ptr<ReplicaRouter> routers[2];
  std::unique_ptr<PsServiceImpl> services[2];
  std::unique_ptr<PsTcpServer> tcp[2];
  std::unique_ptr<grpc::Server> servers[2];
  std::vector<std::string> addresses;
  for (int p = 0; p < 2; ++p) {
    ServerCoreOptions o;
    o.task_index = p;
    o.incarnation = 10 + p;
    cores[p] = std::make_unique<ParameterServerCore>(o);
    routers[p] = std::make_unique<ReplicaRouter>(cores[p].get(), o, &channels);
    services[p] = std::make_unique<PsServiceImpl>(cores[p].get());
    services[p]->set_router(routers[p].get());
    tcp[p] = TcpDataPlane(services[p].get());
    grpc::ServerBuilder builder;
    ConfigureServerBuilder(RpcOptions(), &builder);
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(services[p].get());
    servers[p] = builder.BuildAndStart();
    addresses.push_back(absl::StrCat("127.0.0.1:", port));
  }
  for (int s = 0; s < 2; ++s) {
    CreateVariablesRequest req;
    for (VariableDef& v : VariablesOnStore(plan.placement, s)) *req.add_variable() = std::move(v);
    *req.mutable_optimizer() = BenchOptimizer(job);
    req.set_num_workers(1);
    if (factor == 1) {
      Check(cores[s]->CreateVariables(req).status());
      continue;
    }
    ReplicaConfig* rc = req.mutable_replica();
    rc->set_store(s);
    rc->set_epoch(1);
    rc->set_backup(true);
    Check(routers[1 - s]->CreateVariables(req).status());
    rc->set_backup(false);
    rc->set_backup_task(1 - s);
    rc->set_backup_address(addresses[1 - s]);
    Check(routers[s]->CreateVariables(req).status());
  }
  PsClient client(plan.placement, addresses, &channels, PsClientOptions());
  if (factor == 2) {
    ReplicaRoute route;
    route.set_epoch(1);
    route.add_store_task(0);
    route.add_store_task(1);
    client.SetRoute(route);
  }
  Timing t = StepTime(&client, runner, data, steps, bucket_bytes);
  for (auto& s : tcp) s->Shutdown();
  for (auto& s : servers) s->Shutdown(ShutdownDeadline());
  return t;
}

double PipelineRate(InputDef input, const std::string& file, int64_t examples) {
  input.mutable_train()->clear_files();
  input.mutable_train()->add_files(file);
  input.set_batch_size(256);
  DatasetOptions o;
  o.input = input;
  o.split = input.train();
  o.epochs = 1;
  auto data = Check(Dataset::Create(o));
  absl::Time start = absl::Now();
  Batch b;
  int64_t n = 0;
  while (Check(data->Next(&b))) n += b.size;
  if (n != examples) std::fprintf(stderr, "warning: read %lld of %lld\n", (long long)n, (long long)examples);
  return n / absl::ToDoubleSeconds(absl::Now() - start);
}

int Main() {
  TrainingJob job = Check(LoadJob(absl::GetFlag(FLAGS_job)));
  JobPlan plan = Check(PlanJob(job, 1));
  WorkerAssignment a = AssignmentOf(job, plan);
  const int steps = absl::GetFlag(FLAGS_steps);

  DatasetOptions d;
  d.input = job.input();
  d.split = job.input().train();
  auto data = Check(Dataset::Create(d));
  auto runner = Check(GraphStepRunner::Create(a));

  ServerCoreOptions po;
  po.incarnation = 7;
  ParameterServerCore local_core(po);
  Check(local_core.CreateVariables(Create(job, plan)).status());
  LocalPsClient local(&local_core, 0);
  Timing in_process = StepTime(&local, runner.get(), data.get(), steps);

  ParameterServerCore remote_core(po);
  Check(remote_core.CreateVariables(Create(job, plan)).status());
  PsServiceImpl service(&remote_core);
  std::unique_ptr<PsTcpServer> tcp = TcpDataPlane(&service);
  grpc::ServerBuilder builder;
  ConfigureServerBuilder(RpcOptions(), &builder);
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  const std::string address = absl::StrCat("127.0.0.1:", port);
  ChannelCache channels;
  PsClient remote(plan.placement, {address}, &channels, Over(PsTransport::kTcp));
  PsClient remote_stream(plan.placement, {address}, &channels, Over(PsTransport::kStream));
  const size_t bucket = static_cast<size_t>(absl::GetFlag(FLAGS_bucket_bytes));
  // Over TCP and over the gRPC stream, and whole and bucketed pushes,
  // alternated, twice each: the mean of each (also on two PS below).
  Timing distributed = StepTime(&remote, runner.get(), data.get(), steps);
  Timing streamed = StepTime(&remote_stream, runner.get(), data.get(), steps);
  Timing bucketed = StepTime(&remote, runner.get(), data.get(), steps, bucket);
  distributed = Mean(distributed, StepTime(&remote, runner.get(), data.get(), steps));
  streamed = Mean(streamed, StepTime(&remote_stream, runner.get(), data.get(), steps));
  bucketed = Mean(bucketed, StepTime(&remote, runner.get(), data.get(), steps, bucket));
  Timing loop_serial = LoopStepTime(a, address, false, steps);
  Timing loop_overlap = LoopStepTime(a, address, true, steps);
  Timing loop_bucketed = LoopStepTime(a, address, true, steps, bucket);
  Timing loop_push_behind = LoopStepTime(a, address, true, steps, 0, /*overlap_push=*/true);
  tcp->Shutdown();
  server->Shutdown(ShutdownDeadline());
  // Factor 1, bucketed and factor 2 alternated, twice each (the load of a
  // shared machine moves more than the difference otherwise).
  Timing two_ps = TwoPsStepTime(job, 1, runner.get(), data.get(), steps);
  Timing two_ps_bucketed = TwoPsStepTime(job, 1, runner.get(), data.get(), steps, bucket);
  Timing replicated = TwoPsStepTime(job, 2, runner.get(), data.get(), steps);
  two_ps = Mean(two_ps, TwoPsStepTime(job, 1, runner.get(), data.get(), steps));
  two_ps_bucketed = Mean(two_ps_bucketed, TwoPsStepTime(job, 1, runner.get(), data.get(), steps, bucket));
  replicated = Mean(replicated, TwoPsStepTime(job, 2, runner.get(), data.get(), steps));

  auto line = [](const char* what, const Timing& t) {
    std::printf("  %-30s %7.2f ms/step, CPU %6.2f ms/step", what, t.wall * 1e3, t.cpu * 1e3);
  };
  std::printf("MLP step, batch %d, %d steps (CPU: the whole process, PS included):\n", job.input().batch_size(),
              steps);
  line("in-process PS", in_process);
  std::printf("\n");
  line("PS on loopback, TCP data plane", distributed);
  std::printf(" (ratio %.2f, goal <= 1.15)\n", distributed.wall / in_process.wall);
  line("same over the gRPC stream", streamed);
  std::printf(" (ratio %.2f; TCP is %.2fx faster)\n", streamed.wall / in_process.wall,
              streamed.wall / distributed.wall);
  const std::string b = absl::StrCat("same, buckets of ", bucket >> 10, " KiB");
  line(b.c_str(), bucketed);
  std::printf(" (ratio %.2f; %.2fx the whole push)\n", bucketed.wall / in_process.wall,
              distributed.wall / bucketed.wall);
  std::printf("worker loop (read, pull, compute, push) against the PS over TCP, %d compute thread(s):\n",
              absl::GetFlag(FLAGS_loop_threads));
  line("serial", loop_serial);
  std::printf("\n");
  line("next pull overlapped", loop_overlap);
  std::printf(" (%.2fx; ratio to in-process %.2f)\n", loop_serial.wall / loop_overlap.wall,
              loop_overlap.wall / in_process.wall);
  line("same, bucketed push", loop_bucketed);
  std::printf(" (%.2fx the whole push)\n", loop_overlap.wall / loop_bucketed.wall);
  line("next pull and push overlapped", loop_push_behind);
  std::printf(" (%.2fx the pull alone; ratio to in-process %.2f)\n", loop_overlap.wall / loop_push_behind.wall,
              loop_push_behind.wall / in_process.wall);
  std::printf("two PS on loopback over TCP (factor 2: each push forwarded to its backup's TCP data plane), replicated shards (job.replication):\n");
  line("factor 1", two_ps);
  std::printf("\n");
  line("factor 1, bucketed push", two_ps_bucketed);
  std::printf(" (%.2fx the whole push)\n", two_ps.wall / two_ps_bucketed.wall);
  line("factor 2", replicated);
  std::printf(" (ratio %.2f, goal <= 1.3)\n", replicated.wall / two_ps.wall);

  // The input pipeline, per format, on the same 60k Fashion-MNIST images.
  std::string tmp = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp";
  InputDef idx = job.input();
  double idx_rate = PipelineRate(idx, idx.train().files(0), 60000);
  // Synthetic files of 20k examples x 784 features for the other formats.
  const int kN = 20000, kF = 784;
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> px(0, 255);
  std::string csv = tmp + "/bench.csv", svm = tmp + "/bench.svm", rec = tmp + "/bench.tfrecord";
  {
    std::ofstream c(csv), s(svm);
    auto w = Check(RecordWriter::Open(rec));
    for (int i = 0; i < kN; ++i) {
      tf::Example ex;
      auto& fmap = *ex.mutable_features()->mutable_feature();
      auto* img = fmap["image"].mutable_float_list();
      c << i % 10;
      s << i % 10;
      for (int f = 0; f < kF; ++f) {
        int v = px(rng);
        c << "," << v;
        if (v > 128) s << " " << f << ":" << v;
        img->add_value(static_cast<float>(v));
      }
      c << "\n";
      s << "\n";
      fmap["label"].mutable_int64_list()->add_value(i % 10);
      Check(w->Write(ex.SerializeAsString()));
    }
  }
  InputDef in_csv;
  in_csv.set_format(InputDef::CSV);
  auto* f = in_csv.add_feature();
  f->set_name("x");
  f->add_shape(kF);
  InputDef in_svm;
  in_svm.set_format(InputDef::LIBSVM);
  in_svm.add_feature()->set_name("ids");
  in_svm.mutable_feature(0)->set_kind(FeatureDef::SPARSE);
  InputDef in_rec;
  in_rec.set_format(InputDef::TFRECORD);
  auto* g = in_rec.add_feature();
  g->set_name("image");
  g->add_shape(kF);
  std::printf("input pipeline (batch 256, one epoch, shuffled, prefetch 2):\n");
  std::printf("  IDX (gzip, 60k x 784)   %9.0f examples/s\n", idx_rate);
  std::printf("  CSV (20k x 784)         %9.0f examples/s\n", PipelineRate(in_csv, csv, kN));
  std::printf("  libsvm (20k, ~390 ids)  %9.0f examples/s\n", PipelineRate(in_svm, svm, kN));
  std::printf("  TFRecord (20k x 784)    %9.0f examples/s\n", PipelineRate(in_rec, rec, kN));
  return 0;
}

}  // namespace
}  // namespace psrt

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // As the daemons run (common/daemon.cc): no lock-order graph on every lock.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  if (const char* wd = std::getenv("BUILD_WORKSPACE_DIRECTORY")) {
    if (chdir(wd) != 0) return 2;
  }
  return psrt::Main();
}
