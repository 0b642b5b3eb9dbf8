// The cost of distribution: the MLP example's step through a real gRPC
// parameter server on loopback, beside the same step against an in-process
// one, in the same run; the step over two PS with replicated shards
// (job.replication.factor 2) beside the same two PS without; and the input
// pipeline's examples/s per format.
//
//   bazel run //tests/bench:distribution_bench -- [--steps=300]
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <random>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
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
#include "common/store/replica_router.h"
#include "common/compute/graph_step_runner.h"
#include "common/input/dataset.h"
#include "worker/worker_runtime.h"

ABSL_FLAG(int, steps, 300, "Training steps per measurement.");
ABSL_FLAG(int, loop_threads, 1, "Compute threads of the worker-loop measurement (the PS shares the machine).");
ABSL_FLAG(std::string, job, "examples/fashion_mnist_mlp.pbtxt", "Job file.");

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

// Seconds per step of `steps` training steps through `client`.
double StepTime(ParameterClient* client, GraphStepRunner* runner, Dataset* data, int steps) {
  auto step = [&](int64_t i) {
    Batch b;
    Check(data->Next(&b).status());
    TensorMap dense = Check(client->Pull(runner->DenseVariables(), i));
    StepResult r = Check(runner->Run(dense, {}, b, i));
    RequestId id;
    id.set_step(i);
    id.set_worker_incarnation(1);
    Check(client->Push(id, r.dense_gradients, {}));
  };
  for (int i = 0; i < 20; ++i) step(i);  // warm up
  absl::Time start = absl::Now();
  for (int i = 20; i < 20 + steps; ++i) step(i);
  return absl::ToDoubleSeconds(absl::Now() - start) / steps;
}

// Seconds per step of the worker's own loop (WorkerRuntime: read, pull,
// compute, push) against the PS at `address`, with the next step's read and
// pull overlapping this compute or not. Also the test accuracy after it.
double LoopStepTime(const WorkerAssignment& base, const std::string& address, bool overlap, int steps) {
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
  o.incarnation = overlap ? 2 : 1;
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
  absl::Time start = absl::Now();
  Check(worker.Start(a));
  if (worker.WaitFinished(absl::Minutes(10)) != WorkerStatusResponse::DONE) {
    Check(absl::InternalError(worker.Status().error()));
  }
  return absl::ToDoubleSeconds(absl::Now() - start) / steps;
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

// Two PS on loopback (each a core, a replica router and a gRPC server), the
// plan's store s on PS s and, with `factor` 2, its backup on the other:
// the step time over them through the worker's client.
double TwoPsStepTime(const TrainingJob& job, int factor, GraphStepRunner* runner, Dataset* data, int steps) {
  JobPlan plan = Check(PlanJob(job, 2));
  ChannelCache channels;
  std::unique_ptr<ParameterServerCore> cores[2];
  std::unique_ptr<ReplicaRouter> routers[2];
  std::unique_ptr<PsServiceImpl> services[2];
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
  double t = StepTime(&client, runner, data, steps);
  for (auto& s : servers) s->Shutdown();
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
  double in_process = StepTime(&local, runner.get(), data.get(), steps);

  ParameterServerCore remote_core(po);
  Check(remote_core.CreateVariables(Create(job, plan)).status());
  PsServiceImpl service(&remote_core);
  grpc::ServerBuilder builder;
  ConfigureServerBuilder(RpcOptions(), &builder);
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  const std::string address = absl::StrCat("127.0.0.1:", port);
  ChannelCache channels;
  PsClient remote(plan.placement, {address}, &channels, PsClientOptions());
  double distributed = StepTime(&remote, runner.get(), data.get(), steps);
  double loop_serial = LoopStepTime(a, address, false, steps);
  double loop_overlap = LoopStepTime(a, address, true, steps);
  server->Shutdown();
  double two_ps = TwoPsStepTime(job, 1, runner.get(), data.get(), steps);
  double replicated = TwoPsStepTime(job, 2, runner.get(), data.get(), steps);

  std::printf("MLP step, batch %d, %d steps:\n", job.input().batch_size(), steps);
  std::printf("  in-process PS           %7.2f ms/step\n", in_process * 1e3);
  std::printf("  gRPC PS on loopback     %7.2f ms/step\n", distributed * 1e3);
  std::printf("  ratio (goal <= 1.3)     %7.2f\n", distributed / in_process);
  std::printf("worker loop (read, pull, compute, push) against the gRPC PS, %d compute thread(s):\n",
              absl::GetFlag(FLAGS_loop_threads));
  std::printf("  serial                  %7.2f ms/step\n", loop_serial * 1e3);
  std::printf("  next pull overlapped    %7.2f ms/step (%.2fx; ratio to in-process %.2f)\n",
              loop_overlap * 1e3, loop_serial / loop_overlap, loop_overlap / in_process);
  std::printf("two gRPC PS on loopback, replicated shards (job.replication):\n");
  std::printf("  factor 1                %7.2f ms/step\n", two_ps * 1e3);
  std::printf("  factor 2                %7.2f ms/step (ratio %.2f, goal <= 1.3)\n", replicated * 1e3,
              replicated / two_ps);

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
  if (const char* wd = std::getenv("BUILD_WORKSPACE_DIRECTORY")) {
    if (chdir(wd) != 0) return 2;
  }
  return psrt::Main();
}
