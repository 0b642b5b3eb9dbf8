// One training step of the MLP example (forward, loss, every gradient) on
// the GPU executor against the CPU executor, same graph and same batch, at
// batch 128 and 1024; prints milliseconds per step and the speed-up.
// Feeds and fetches cross the host boundary each step on both, as a
// worker's pull and push would. Without a GPU it prints "skipped: no GPU"
// and exits 0.
//
//   bazel run --config=cuda //tests/bench:gpu_step_bench -- [--min_seconds=1]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "common/cuda/gpu_axpy.h"
#include "common/compute/executor.h"
#include "worker/gpu/gpu_executor.h"
#include "worker/gpu/graph_fixture.h"

ABSL_FLAG(std::string, job, "examples/fashion_mnist_mlp.pbtxt", "job file, relative to the workspace");
ABSL_FLAG(double, min_seconds, 1.0, "time per measurement");
ABSL_FLAG(int, threads, 0, "CPU executor threads (0 = one per core)");

namespace psrt {
namespace {

using Clock = std::chrono::steady_clock;

// Seconds per step, after two warm-up steps (the GPU's first allocates its pool).
double SecondsPerStep(StepExecutor& e, const std::map<std::string, Tensor>& feeds,
                      const std::vector<std::string>& fetches) {
  auto step = [&](uint64_t seed) {
    auto r = e.Run(feeds, fetches, seed, true);
    if (!r.ok()) {
      std::fprintf(stderr, "%s: %s\n", e.device_name().c_str(), std::string(r.status().message()).c_str());
      std::exit(1);
    }
  };
  step(1);
  step(2);
  const double budget = absl::GetFlag(FLAGS_min_seconds);
  int64_t steps = 0;
  const auto start = Clock::now();
  double secs = 0;
  do {
    step(3 + steps++);
    secs = std::chrono::duration<double>(Clock::now() - start).count();
  } while (secs < budget);
  return secs / steps;
}

int Main() {
  cuda::GpuProbe probe = cuda::ProbeGpu();
  if (!probe.available) {
    std::printf("skipped: no GPU (%s)\n", probe.why_not.c_str());
    return 0;
  }
  std::string path = absl::GetFlag(FLAGS_job);
  if (path[0] != '/' && std::getenv("BUILD_WORKSPACE_DIRECTORY")) {
    path = absl::StrCat(std::getenv("BUILD_WORKSPACE_DIRECTORY"), "/", path);
  }
  auto compiled = CompileJobFile(path);
  if (!compiled.ok()) {
    std::fprintf(stderr, "%s\n", std::string(compiled.status().message()).c_str());
    return 1;
  }
  const GraphDef& graph = compiled->model.graph;
  ExecutorOptions o;
  o.threads = absl::GetFlag(FLAGS_threads);
  auto cpu = Executor::Create(graph, o);
  auto gpu = GpuExecutor::Create(graph);
  if (!cpu.ok() || !gpu.ok()) {
    std::fprintf(stderr, "%s\n", std::string((cpu.ok() ? gpu.status() : cpu.status()).message()).c_str());
    return 1;
  }
  std::printf("%s, step = forward + loss + %zu gradients, feeds in and fetches out each step\n",
              compiled->job.name().c_str(), compiled->model.gradients.size());
  std::printf("cpu executor: %d threads; gpu executor: %s\n",
              o.threads > 0 ? o.threads : static_cast<int>(std::thread::hardware_concurrency()),
              (*gpu)->device_name().c_str());
  for (int64_t batch : {128, 1024}) {
    auto feeds = RandomFeeds(graph, batch, compiled->job.input().num_classes(), 7);
    double c = SecondsPerStep(**cpu, feeds, compiled->fetches);
    double g = SecondsPerStep(**gpu, feeds, compiled->fetches);
    std::printf("batch %5lld  cpu %8.3f ms/step  gpu %8.3f ms/step  gpu speed-up %.2fx\n",
                static_cast<long long>(batch), c * 1e3, g * 1e3, c / g);
  }
  gpu::PoolStats s = (*gpu)->pool_stats();
  std::printf("gpu pool: %lld device allocations, %lld reuses, peak %.1f MiB\n", static_cast<long long>(s.allocations),
              static_cast<long long>(s.reuses), s.peak_bytes / 1048576.0);
  return 0;
}

}  // namespace
}  // namespace psrt

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return psrt::Main();
}
