// Kernel and trainer throughput, printed as a table:
//   - MatMul and Conv2D (im2col + contraction) GFLOP/s of our CPU kernels,
//     and depthwise Conv2D's forward and gradients,
//     beside Eigen's own matrix product (Eigen::Matrix, c = a * b) on the
//     same shapes in the same run, single-threaded and on every core;
//   - in-process trainer examples/s on the example jobs.
//
//   bazel run //tests/bench:kernel_bench -- [--trainer_steps=200] [--jobs=a.pbtxt,b.pbtxt]
#include "common/compute/kernels/kernel.h"  // first: it sets EIGEN_USE_THREADS

#include <chrono>
#include <iostream>
#include <thread>

#include "Eigen/Core"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/graph/graph_builder.h"
#include "common/plan/job_planner.h"
#include "common/store/local_ps_client.h"
#include "common/compute/graph_step_runner.h"
#include "common/input/dataset.h"
#include "common/compute/kernels/kernel.h"

ABSL_FLAG(int, trainer_steps, 200, "steps per example job (0 = skip the trainer)");
ABSL_FLAG(std::string, jobs, "examples/fashion_mnist_mlp.pbtxt,examples/fashion_mnist_cnn.pbtxt",
          "example jobs, relative to the workspace");
ABSL_FLAG(double, min_seconds, 0.5, "time per measurement");

namespace psrt {
namespace {

using Clock = std::chrono::steady_clock;

// Runs fn until min_seconds pass; returns seconds per call.
template <typename F>
double TimePerCall(F fn) {
  fn();  // warm up
  const double budget = absl::GetFlag(FLAGS_min_seconds);
  int64_t calls = 0;
  const auto start = Clock::now();
  double secs = 0;
  do {
    fn();
    ++calls;
    secs = std::chrono::duration<double>(Clock::now() - start).count();
  } while (secs < budget);
  return secs / calls;
}

Tensor Random(TensorShape s) {
  Tensor t(DT_FLOAT, std::move(s));
  t.flat<float>().setRandom();
  return t;
}

double RunKernel(const std::string& op, const NodeDef& node, std::vector<Tensor> inputs,
                 const Eigen::ThreadPoolDevice& device) {
  const Kernel* k = KernelRegistry::Cpu().Find(op);
  CHECK(k != nullptr) << op;
  KernelContext ctx;
  ctx.node = &node;
  ctx.device = &device;
  return TimePerCall([&] {
    ctx.inputs = inputs;
    ctx.outputs.clear();
    absl::Status s = (*k)(ctx);
    CHECK(s.ok()) << s;
  });
}

void MatMulRow(int64_t m, int64_t k, int64_t n, const Eigen::ThreadPoolDevice& one,
               const Eigen::ThreadPoolDevice& all) {
  NodeDef node;
  node.set_name("matmul");
  node.set_op("MatMul");
  Tensor a = Random(TensorShape({m, k})), b = Random(TensorShape({k, n}));
  const double flops = 2.0 * m * k * n;
  const double ours1 = flops / RunKernel("MatMul", node, {a, b}, one) / 1e9;
  const double oursn = flops / RunKernel("MatMul", node, {a, b}, all) / 1e9;
  Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> c(m, n);
  auto A = a.matrix<float>();
  auto B = b.matrix<float>();
  const double eigen = flops / TimePerCall([&] { c.noalias() = A * B; }) / 1e9;
  std::cout << absl::StrFormat("MatMul %5dx%5dx%5d  ours(1t) %6.1f  eigen(1t) %6.1f  ratio %.2f  ours(%dt) %6.1f\n",
                               m, k, n, ours1, eigen, ours1 / eigen, all.numThreads(), oursn);
}

void ConvRow(int64_t batch, int64_t hw, int64_t cin, int64_t ksize, int64_t cout,
             const Eigen::ThreadPoolDevice& one, const Eigen::ThreadPoolDevice& all) {
  NodeDef node;
  node.set_name("conv");
  node.set_op("Conv2D");
  (*node.mutable_attr())["padding"] = AttrS("SAME");
  (*node.mutable_attr())["stride"] = AttrI(1);
  Tensor x = Random(TensorShape({batch, hw, hw, cin})), k = Random(TensorShape({ksize, ksize, cin, cout}));
  const int64_t rows = batch * hw * hw, patch = ksize * ksize * cin;
  const double flops = 2.0 * rows * patch * cout;
  const double ours1 = flops / RunKernel("Conv2D", node, {x, k}, one) / 1e9;
  const double oursn = flops / RunKernel("Conv2D", node, {x, k}, all) / 1e9;
  // Eigen's product on the im2col matrix alone: the bound im2col + GEMM can reach.
  Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> col(rows, patch), c(rows, cout);
  col.setRandom();
  Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> Km(k.data<float>(), patch, cout);
  const double eigen = flops / TimePerCall([&] { c.noalias() = col * Km; }) / 1e9;
  std::cout << absl::StrFormat(
      "Conv2D [%d,%d,%d,%d] k%dx%d->%d SAME  ours(1t) %6.1f  eigen gemm only(1t) %6.1f  ratio %.2f  ours(%dt) %6.1f\n",
      batch, hw, hw, cin, ksize, ksize, cout, ours1, eigen, ours1 / eigen, all.numThreads(), oursn);
}

// A depthwise 3x3 convolution (MobileNetV2's middle layers): forward, input
// and filter gradients, in useful GFLOP/s (2 * outputs * 9 per pass).
void DepthwiseRow(int64_t batch, int64_t hw, int64_t ch, int64_t stride, const Eigen::ThreadPoolDevice& all) {
  NodeDef node;
  node.set_name("depthwise");
  node.set_op("Conv2D");
  (*node.mutable_attr())["padding"] = AttrS("EXPLICIT");
  (*node.mutable_attr())["pads"] = AttrInts({1, 1, 1, 1});
  (*node.mutable_attr())["stride"] = AttrI(stride);
  (*node.mutable_attr())["group"] = AttrI(ch);
  Tensor x = Random(TensorShape({batch, hw, hw, ch})), k = Random(TensorShape({3, 3, 1, ch}));
  const int64_t out_hw = (hw - 1) / stride + 1;
  Tensor dy = Random(TensorShape({batch, out_hw, out_hw, ch}));
  const double flops = 2.0 * batch * out_hw * out_hw * ch * 9;
  const double fwd = flops / RunKernel("Conv2D", node, {x, k}, all) / 1e9;
  const double dx = flops / RunKernel("Conv2DBackpropInput", node, {x, k, dy}, all) / 1e9;
  const double dk = flops / RunKernel("Conv2DBackpropFilter", node, {x, k, dy}, all) / 1e9;
  std::cout << absl::StrFormat("Depthwise [%d,%d,%d,%d] 3x3 stride %d (%dt)  forward %6.2f  dx %6.2f  dk %6.2f\n", batch, hw,
                               hw, ch, stride, all.numThreads(), fwd, dx, dk);
}

void TrainerRow(const std::string& path, int64_t steps) {
  auto job = LoadJob(path);
  if (!job.ok()) {
    std::cout << "trainer: " << job.status() << " (run it with bazel run from the workspace)\n";
    return;
  }
  auto plan = PlanJob(*job, 1);
  if (!plan.ok()) {
    std::cout << "trainer: " << plan.status() << "\n";
    return;
  }
  // The in-process trainer's step: the same runner, PS core and data.
  ServerCoreOptions po;
  ParameterServerCore ps(po);
  CreateVariablesRequest req;
  for (const VariablePlacement& vp : plan->placement.variable()) *req.add_variable() = vp.variable();
  *req.mutable_optimizer() = job->optimizer();
  req.set_num_workers(1);
  if (!ps.CreateVariables(req).ok()) return;
  LocalPsClient client(&ps, 0);
  auto runner = GraphStepRunner::Create(AssignmentOf(*job, *plan));
  DatasetOptions d;
  d.input = job->input();
  d.split = job->input().train();
  auto data = Dataset::Create(d);
  if (!runner.ok() || !data.ok()) return;
  auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < steps; ++i) {
    Batch b;
    if (!(*data)->Next(&b).ok()) return;
    auto dense = client.Pull((*runner)->DenseVariables(), i);
    auto r = (*runner)->Run(*dense, {}, b, i);
    RequestId id;
    id.set_step(i);
    if (!r.ok() || !client.Push(id, r->dense_gradients, {}).ok()) return;
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << absl::StrFormat("trainer %-40s %5d steps  batch %d  %8.0f examples/s\n", path, steps,
                               job->input().batch_size(), steps * job->input().batch_size() / secs);
}

}  // namespace
}  // namespace psrt

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  Eigen::ThreadPool pool1(1), pooln(cores);
  Eigen::ThreadPoolDevice one(&pool1, 1), all(&pooln, cores);
  std::cout << "GFLOP/s; " << cores << " cores; Eigen " << EIGEN_WORLD_VERSION << "." << EIGEN_MAJOR_VERSION << "."
            << EIGEN_MINOR_VERSION << "\n";
  for (auto [m, k, n] : std::vector<std::array<int64_t, 3>>{
           {64, 784, 256}, {64, 256, 128}, {784, 64, 256}, {256, 256, 256}, {512, 512, 512}, {1024, 1024, 1024}}) {
    psrt::MatMulRow(m, k, n, one, all);
  }
  psrt::ConvRow(64, 28, 1, 5, 16, one, all);
  psrt::ConvRow(64, 14, 16, 5, 32, one, all);
  psrt::ConvRow(32, 14, 32, 5, 64, one, all);
  psrt::DepthwiseRow(32, 28, 32, 1, all);
  psrt::DepthwiseRow(32, 14, 96, 2, all);
  if (const int64_t steps = absl::GetFlag(FLAGS_trainer_steps); steps > 0) {
    std::string root;
    if (const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY")) root = std::string(ws) + "/";
    const std::vector<std::string> jobs = absl::StrSplit(absl::GetFlag(FLAGS_jobs), ',');
    for (const std::string& job : jobs) {
      psrt::TrainerRow(job[0] == '/' ? job : root + job, steps);
    }
  }
  return 0;
}
