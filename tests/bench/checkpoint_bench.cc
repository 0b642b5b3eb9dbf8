// Checkpoint cost with 2 PS holding --gib of variables and optimizer slots
// together: the training pause per checkpoint (the in-memory copy) beside a
// plain memcpy of the same bytes, and the durable write throughput beside a
// sequential `dd oflag=direct` of the same size, in the same run.
//
//   bazel run //tests/bench:checkpoint_bench -- [--gib=1] [--dir=/tmp/psrt-ckpt-bench]
//       [--direct_io=true] [--write_mib=64]
// Then full vs incremental: one PS holding a hash embedding table of
// --table_rows rows (Adam), of which --touched (a fraction) are updated
// between checkpoints: bytes written and time to durable of a full
// checkpoint and of a delta (CheckpointPolicy.incremental), and the time to
// read each back (a delta's read applies it to its base).
//       [--table_rows=10000000] [--table_dim=8] [--touched=0.01]   (--table_rows=0: skip)
// Results: tests/bench/CHECKPOINT_BENCH_RESULTS.md.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/store/server_core.h"

ABSL_FLAG(double, gib, 1.0, "Variables + slots over both PS, GiB.");
ABSL_FLAG(std::string, dir, "/tmp/psrt-ckpt-bench", "Checkpoint directory (on the disk to measure).");
ABSL_FLAG(bool, direct_io, true, "Data files written with O_DIRECT (SnapshotStoreOptions::direct_io).");
ABSL_FLAG(int64_t, write_mib, 64, "Largest write of tensor bytes, MiB (SnapshotStoreOptions::chunk_bytes).");
ABSL_FLAG(int64_t, table_rows, 10000000, "Full vs incremental: rows of the hash table (0: skip).");
ABSL_FLAG(int64_t, table_dim, 8, "Full vs incremental: the table's row width.");
ABSL_FLAG(double, touched, 0.01, "Full vs incremental: fraction of the rows updated between checkpoints.");

namespace psrt {
namespace {

void Check(const absl::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
    std::exit(1);
  }
}

// Until every PS reports `step` durable (or fails).
void WaitDurable(const std::vector<std::unique_ptr<ParameterServerCore>>& ps, int64_t step) {
  while (true) {
    bool all = true;
    for (auto& p : ps) {
      PsStatusResponse s = p->Status();
      if (!s.error().empty()) Check(absl::DataLossError(s.error()));
      all &= std::find(s.durable_snapshots().begin(), s.durable_snapshots().end(), step) != s.durable_snapshots().end();
    }
    if (all) return;
    absl::SleepFor(absl::Milliseconds(10));  // polling the durable state
  }
}

// The size of the data file of `step` in `store_dir`.
int64_t DataFileBytes(const std::string& store_dir, int64_t step) {
  const std::string prefix = absl::StrFormat("snapshot-%020d-", step);
  for (const auto& e : std::filesystem::directory_iterator(store_dir)) {
    if (e.path().filename().string().rfind(prefix, 0) == 0) return static_cast<int64_t>(e.file_size());
  }
  return -1;
}

void FullVsIncremental(const std::string& dir) {
  const int64_t rows = absl::GetFlag(FLAGS_table_rows), dim = absl::GetFlag(FLAGS_table_dim);
  ServerCoreOptions o;
  o.snapshot_root = dir;
  o.store_name = "ps-inc";
  o.snapshot.direct_io = absl::GetFlag(FLAGS_direct_io);
  o.snapshot.chunk_bytes = absl::GetFlag(FLAGS_write_mib) << 20;
  std::vector<std::unique_ptr<ParameterServerCore>> ps;
  ps.push_back(std::make_unique<ParameterServerCore>(o));
  CreateVariablesRequest req;
  VariableDef* d = req.add_variable();
  d->set_name("emb");
  d->set_kind(VariableDef::HASH_TABLE);
  d->set_dtype(DT_FLOAT);
  d->mutable_shape()->add_dim(0);
  d->mutable_shape()->add_dim(dim);
  d->mutable_initializer()->set_kind(InitializerDef::CONSTANT);
  d->mutable_initializer()->set_value(0.5f);
  req.mutable_optimizer()->mutable_adam()->set_learning_rate(0.001f);
  req.set_num_workers(1);
  Check(ps[0]->CreateVariables(req).status());
  int64_t push_step = 0;
  auto push = [&](const std::vector<int64_t>& ids) {
    constexpr size_t kBatch = 1 << 20;
    for (size_t at = 0; at < ids.size(); at += kBatch) {
      const int64_t n = static_cast<int64_t>(std::min(kBatch, ids.size() - at));
      Tensor g(DT_FLOAT, TensorShape({n, dim}));
      g.flat<float>().setConstant(0.01f);
      RequestId id;
      id.set_worker(0);
      id.set_worker_incarnation(1);
      id.set_step(push_step++);
      std::vector<int64_t> part(ids.begin() + at, ids.begin() + at + n);
      Check(ps[0]->PushRows(id, {{"emb", Tensor::FromVector<int64_t>(part, TensorShape({n})), g}}).status());
    }
  };
  std::vector<int64_t> all(rows);
  for (int64_t i = 0; i < rows; ++i) all[i] = i * 2654435761LL;  // spread over the id space
  absl::Time t0 = absl::Now();
  push(all);
  std::printf("\nfull vs incremental: 1 PS, hash table of %lld rows x %lld (Adam: %.2f GiB with slots), filled in %.1f s\n",
              static_cast<long long>(rows), static_cast<long long>(dim), ps[0]->Status().bytes() / double(1 << 30),
              absl::ToDoubleSeconds(absl::Now() - t0));
  std::mt19937_64 rng(7);
  const int64_t touched = std::max<int64_t>(1, static_cast<int64_t>(rows * absl::GetFlag(FLAGS_touched)));
  auto touch = [&] {
    std::vector<int64_t> ids;
    std::shuffle(all.begin(), all.end(), rng);
    ids.assign(all.begin(), all.begin() + touched);
    push(ids);
  };
  const std::string store_dir = absl::StrCat(dir, "/bench-inc/ps-inc");
  // Step 1 warms the snapshot memory up; steps 2 (full) and 3 (a delta on
  // 2) each follow `touched` updated rows.
  struct Run {
    double pause = 0, durable = 0, read = 0;
    int64_t bytes = 0;
  } runs[4];
  for (int64_t step = 1; step <= 3; ++step) {
    if (step > 1) touch();
    SnapshotRequest sreq;
    sreq.set_step(step);
    sreq.set_checkpoint("bench-inc");
    sreq.set_keep(3);
    sreq.set_full_every(step == 3 ? 8 : 0);
    t0 = absl::Now();
    absl::StatusOr<SnapshotResponse> r = ps[0]->Snapshot(sreq);
    Check(r.status());
    if (r->delta() != (step == 3)) Check(absl::InternalError(absl::StrCat("step ", step, ": delta is ", r->delta())));
    runs[step].pause = absl::ToDoubleSeconds(absl::Now() - t0);
    WaitDurable(ps, step);
    runs[step].durable = absl::ToDoubleSeconds(absl::Now() - t0);
    runs[step].bytes = DataFileBytes(store_dir, step);
  }
  // Each read twice, the second timed: both from the page cache, as the
  // first read of one would otherwise warm the other's base.
  absl::StatusOr<std::unique_ptr<SnapshotStore>> store = SnapshotStore::OpenReadOnly(store_dir);
  Check(store.status());
  for (int round = 0; round < 2; ++round) {
    for (int64_t step = 2; step <= 3; ++step) {
      t0 = absl::Now();
      Check((*store)->Read(step).status());
      runs[step].read = absl::ToDoubleSeconds(absl::Now() - t0);
    }
  }
  const Run& full = runs[2];
  const Run& delta = runs[3];
  std::printf("full checkpoint            %10lld bytes written   pause %6.3f s   durable %6.3f s   read back %6.3f s\n",
              static_cast<long long>(full.bytes), full.pause, full.durable, full.read);
  std::printf("incremental (%5.2f %% rows) %10lld bytes written   pause %6.3f s   durable %6.3f s   read back %6.3f s (base + delta)\n",
              100.0 * touched / rows, static_cast<long long>(delta.bytes), delta.pause, delta.durable, delta.read);
  std::printf("delta / full               bytes %6.4f   pause %6.3f   durable %6.3f   read %6.2f\n",
              static_cast<double>(delta.bytes) / full.bytes, delta.pause / full.pause, delta.durable / full.durable,
              delta.read / full.read);
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
    WaitDurable(ps, step);
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
  if (absl::GetFlag(FLAGS_table_rows) > 0) {
    ps.clear();
    FullVsIncremental(dir);
  }
  return 0;
}

}  // namespace
}  // namespace psrt

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return psrt::Main();
}
