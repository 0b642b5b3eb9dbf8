// Checkpoint cost with 2 PS holding --gib of variables and optimizer slots
// together: the training pause per checkpoint (the in-memory copy) beside a
// plain memcpy of the same bytes, and the durable write throughput beside a
// sequential `dd oflag=direct` of the same size, in the same run.
//
//   bazel run //tests/bench:checkpoint_bench -- [--gib=1] [--dir=/tmp/psrt-ckpt-bench]
//       [--direct_io=true] [--write_mib=64]
// Results: tests/bench/CHECKPOINT_BENCH_RESULTS.md.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/store/server_core.h"

ABSL_FLAG(double, gib, 1.0, "Variables + slots over both PS, GiB.");
ABSL_FLAG(std::string, dir, "/tmp/psrt-ckpt-bench", "Checkpoint directory (on the disk to measure).");
ABSL_FLAG(bool, direct_io, true, "Data files written with O_DIRECT (SnapshotStoreOptions::direct_io).");
ABSL_FLAG(int64_t, write_mib, 64, "Largest write of tensor bytes, MiB (SnapshotStoreOptions::chunk_bytes).");

namespace psrt {
namespace {

void Check(const absl::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
    std::exit(1);
  }
}

int Main() {
  const std::string dir = absl::GetFlag(FLAGS_dir);
  std::system(absl::StrCat("rm -rf '", dir, "' && mkdir -p '", dir, "'").c_str());
  const int64_t total = static_cast<int64_t>(absl::GetFlag(FLAGS_gib) * (1 << 30));
  // Adam: value + 2 slots, so the variables are a third of the bytes.
  const int64_t per_ps_floats = total / 2 / 3 / 4;
  const int64_t cols = 1024, rows = per_ps_floats / cols / 8;
  std::vector<std::unique_ptr<ParameterServerCore>> ps;
  for (int p = 0; p < 2; ++p) {
    ServerCoreOptions o;
    o.snapshot_root = dir;  // checkpoint "bench" in DIR/bench/ps-N
    o.task_index = p;
    o.snapshot.direct_io = absl::GetFlag(FLAGS_direct_io);
    o.snapshot.chunk_bytes = absl::GetFlag(FLAGS_write_mib) << 20;
    ps.push_back(std::make_unique<ParameterServerCore>(o));
    CreateVariablesRequest req;
    for (int v = 0; v < 8; ++v) {
      VariableDef* d = req.add_variable();
      d->set_name(absl::StrCat("w", v));
      d->set_dtype(DT_FLOAT);
      d->mutable_shape()->add_dim(rows);
      d->mutable_shape()->add_dim(cols);
      d->mutable_initializer()->set_kind(InitializerDef::CONSTANT);
      d->mutable_initializer()->set_value(0.5f);
    }
    req.mutable_optimizer()->mutable_adam()->set_learning_rate(0.001f);
    req.set_num_workers(1);
    Check(ps.back()->CreateVariables(req).status());
  }
  int64_t bytes = 0;
  for (auto& p : ps) bytes += p->Status().bytes();
  std::printf("2 PS, %.2f GiB of variables and Adam slots\n", bytes / double(1 << 30));

  // Baseline: memcpy of the same bytes into already-touched memory, and into
  // fresh memory (what a copy that allocates pays).
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  absl::Time t0 = absl::Now();
  std::memcpy(dst.data(), src.data(), bytes);
  double memcpy_warm = absl::ToDoubleSeconds(absl::Now() - t0);
  dst.clear();
  dst.shrink_to_fit();
  t0 = absl::Now();
  char* fresh = static_cast<char*>(std::malloc(bytes));
  std::memcpy(fresh, src.data(), bytes);
  double memcpy_fresh = absl::ToDoubleSeconds(absl::Now() - t0);
  std::free(fresh);
  src.clear();
  src.shrink_to_fit();

  // The pause: both PS copy in memory, then the write runs in the
  // background. Two checkpoints: the first pays for fresh memory, the
  // second reuses what the first released (steady state).
  double pause = 0, first_pause = 0, durable = 0;
  for (int64_t step = 1; step <= 2; ++step) {
    SnapshotRequest req;
    req.set_step(step);
    req.set_checkpoint("bench");
    req.set_keep(1);
    t0 = absl::Now();
    for (auto& p : ps) Check(p->Snapshot(req).status());
    pause = absl::ToDoubleSeconds(absl::Now() - t0);
    if (step == 1) first_pause = pause;
    while (true) {  // durable: until both report the step synced
      bool all = true;
      for (auto& p : ps) {
        PsStatusResponse s = p->Status();
        if (!s.error().empty()) Check(absl::DataLossError(s.error()));
        all &= std::find(s.durable_snapshots().begin(), s.durable_snapshots().end(), step) != s.durable_snapshots().end();
      }
      if (all) break;
      absl::SleepFor(absl::Milliseconds(10));  // polling the durable state
    }
    durable = absl::ToDoubleSeconds(absl::Now() - t0);
  }

  // Baseline: sequential direct write of the same size.
  std::string dd = absl::StrCat("dd if=/dev/zero of='", dir, "/dd.bin' bs=8M count=", bytes / (8 << 20),
                                " oflag=direct status=none");
  t0 = absl::Now();
  int rc = std::system(dd.c_str());
  double dd_s = absl::ToDoubleSeconds(absl::Now() - t0);
  std::system(absl::StrCat("rm -f '", dir, "/dd.bin'").c_str());

  double gb = bytes / 1e9;
  std::printf("pause (in-memory copy)     %7.3f s (first checkpoint %.3f s)   memcpy warm %6.3f s (fresh %6.3f s)   pause/memcpy %5.2f (goal <= 2)\n",
              pause, first_pause, memcpy_warm, memcpy_fresh, pause / memcpy_warm);
  std::printf("durable write              %7.3f s = %6.0f MB/s   dd oflag=direct %6.3f s = %6.0f MB/s%s   ratio %5.2f (goal >= 0.7)\n",
              durable, gb * 1e3 / durable, dd_s, gb * 1e3 / dd_s, rc == 0 ? "" : " (dd failed)",
              dd_s / durable);
  return 0;
}

}  // namespace
}  // namespace psrt

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return psrt::Main();
}
