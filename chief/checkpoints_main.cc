// The checkpoint inspector.
//
//   bazel run //chief:checkpoints -- DIR [--verify]
//       lists the committed checkpoints: step, time, shards, variables,
//       bytes, kind (full, or an incremental checkpoint's "delta on B");
//       with --verify, reads every shard's snapshot data and checks
//       its checksums, marking the checkpoints that cannot be restored
//   Stores are opened read-only: inspecting a checkpoint changes no file.
//   A manifest naming a store outside DIR ("../../x", "/x") is CORRUPT, and
//   no store it names is read.
//   bazel run //chief:checkpoints -- DIR --step=S --variable=V
//       prints V's shape and summary statistics at step S (read from the
//       PS snapshot stores, checksums verified)
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/flags_help.h"
#include "common/checkpoint/checkpoint_manifest.h"
#include "common/snapshot/snapshot_store.h"

ABSL_FLAG(int64_t, step, -1, "A committed step to look into (default: list them all).");
ABSL_FLAG(std::string, variable, "", "With --step: the variable to summarize.");
ABSL_FLAG(bool, verify, false,
          "Read every shard of every checkpoint and check its checksums (slower: reads all the data).");

namespace psrt {
namespace {

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
  return 2;
}

std::string ShardDir(const ManifestStore& store, const CheckpointManifest::Shard& shard) {
  return store.dir() + "/" + shard.path();
}

// OK when every shard of `m` reads whole, checksums verified.
absl::Status Verify(const ManifestStore& store, const CheckpointManifest& m) {
  for (const auto& shard : m.shard()) {
    absl::StatusOr<std::unique_ptr<SnapshotStore>> ps = SnapshotStore::OpenReadOnly(ShardDir(store, shard));
    if (!ps.ok()) return ps.status();
    absl::Status s = (*ps)->Read(m.step()).status();
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat("ps:", shard.ps_task(), ": ", s.message()));
  }
  return absl::OkStatus();
}

// The shape the checkpoint was taken with, from its stores' names: "2 PS",
// "2 worker replicas" (a mirrored strategy), or both (hybrid). Any layout
// restores onto any other (restore_assembly.h).
std::string Layout(const CheckpointManifest& m) {
  int ps = 0, replicas = 0;
  for (const auto& shard : m.shard()) {
    if (absl::StartsWith(shard.path(), "worker-")) {
      ++replicas;
    } else {
      ++ps;
    }
  }
  std::string out;
  if (ps > 0) out = absl::StrCat(ps, " PS");
  if (replicas > 0) absl::StrAppend(&out, out.empty() ? "" : " + ", replicas, replicas == 1 ? " replica" : " replicas");
  return out;
}

// "full", or for an incremental checkpoint "delta on B" (each PS's
// snapshot holds the rows touched since step B; some PS may have written a
// full one: "delta on B, 1 of 2").
std::string Kind(const CheckpointManifest& m) {
  std::set<int64_t> bases;
  int deltas = 0;
  for (const auto& shard : m.shard()) {
    if (!shard.delta()) continue;
    ++deltas;
    bases.insert(shard.base_step());
  }
  if (deltas == 0) return "full";
  std::string out = absl::StrCat("delta on ", absl::StrJoin(bases, "/"));
  if (deltas < m.shard_size()) absl::StrAppend(&out, ", ", deltas, " of ", m.shard_size());
  return out;
}

int List(const ManifestStore& store, bool verify) {
  std::vector<int64_t> steps = store.Steps();
  if (steps.empty()) return Fail(absl::NotFoundError(absl::StrCat("no committed checkpoints in ", store.dir())));
  std::printf("%-10s %-22s %-6s %-22s %-9s %-12s %-20s%s\n", "step", "committed (UTC)", "shards", "taken with",
              "variables", "bytes", "kind", verify ? " data" : "");
  int damaged = 0;
  for (int64_t step : steps) {
    absl::StatusOr<CheckpointManifest> m = store.Read(step);
    if (!m.ok()) {
      std::printf("%-10lld CORRUPT: %s\n", static_cast<long long>(step), std::string(m.status().message()).c_str());
      ++damaged;
      continue;
    }
    int64_t bytes = 0;
    for (const auto& s : m->shard()) bytes += s.bytes();
    std::string data;
    if (verify) {
      absl::Status v = Verify(store, *m);
      data = v.ok() ? " ok" : absl::StrCat(" DAMAGED: ", v.message());
      damaged += v.ok() ? 0 : 1;
    }
    std::printf("%-10lld %-22s %-6d %-22s %-9d %-12lld %-20s%s\n", static_cast<long long>(step),
                absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::FromUnixMillis(m->commit_time_unix_ms()), absl::UTCTimeZone()).c_str(),
                m->shard_size(), Layout(*m).c_str(), m->variable_size(), static_cast<long long>(bytes), Kind(*m).c_str(),
                data.c_str());
  }
  if (verify) std::printf("%d of %zu checkpoints damaged\n", damaged, steps.size());
  return damaged > 0 ? 1 : 0;
}

int Show(const ManifestStore& store, int64_t step, const std::string& variable) {
  absl::StatusOr<CheckpointManifest> m = store.Read(step);
  if (!m.ok()) return Fail(m.status());
  std::vector<std::string> names;
  for (const auto& v : m->variable()) names.push_back(v.name());
  if (variable.empty()) {
    std::printf("step %lld: %s\n", static_cast<long long>(step), absl::StrJoin(names, ", ").c_str());
    return 0;
  }
  bool found = false;
  for (const auto& shard : m->shard()) {
    absl::StatusOr<std::unique_ptr<SnapshotStore>> ps = SnapshotStore::OpenReadOnly(ShardDir(store, shard));
    if (!ps.ok()) return Fail(ps.status());
    absl::StatusOr<PsSnapshot> snap = (*ps)->Read(step);
    if (!snap.ok()) return Fail(snap.status());
    for (const VariableState& st : snap->variables) {
      if (st.def.name() != variable) continue;
      found = true;
      // The store refuses a value that is not float32 (an index naming
      // another dtype); said here too rather than read as floats.
      if (st.value.dtype() != DT_FLOAT) {
        return Fail(absl::DataLossError(absl::StrCat(ShardDir(store, shard), ": ", variable, " is ",
                                                     DataTypeName(st.value.dtype()), ", not float32")));
      }
      const float* d = st.value.data<float>();
      int64_t n = st.value.NumElements();
      double sum = 0, sq = 0, lo = std::numeric_limits<double>::infinity(), hi = -lo;
      for (int64_t i = 0; i < n; ++i) {
        sum += d[i];
        sq += static_cast<double>(d[i]) * d[i];
        lo = std::min<double>(lo, d[i]);
        hi = std::max<double>(hi, d[i]);
      }
      double mean = n ? sum / n : 0;
      std::printf("%s on %s: shape %s (rows %lld..%lld), %lld values: mean %.6g std %.6g min %.6g max %.6g, "
                  "%zu optimizer slots, %lld updates\n",
                  variable.c_str(), shard.path().c_str(), st.value.shape().ToString().c_str(),
                  static_cast<long long>(st.def.row_begin()), static_cast<long long>(st.def.row_end()),
                  static_cast<long long>(n), mean, std::sqrt(std::max(0.0, n ? sq / n - mean * mean : 0)), lo, hi,
                  st.slots.size(), static_cast<long long>(st.updates));
    }
  }
  if (!found) {
    return Fail(absl::NotFoundError(absl::StrCat("no variable ", variable, " at step ", step, " (it has: ",
                                                 absl::StrJoin(names, ", "), ")")));
  }
  return 0;
}

}  // namespace
}  // namespace psrt

int main(int argc, char** argv) {
  constexpr char kUsage[] =
      "Lists committed checkpoints, or summarizes a variable of one.\n"
      "Usage: checkpoints DIR [--verify] [--step=S --variable=V]";
  psrt::HandleHelp(argc, argv, kUsage, {{__FILE__}, {}});
  absl::SetProgramUsageMessage(kUsage);
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 2) {
    std::fprintf(stderr, "usage: checkpoints DIR [--verify] [--step=S --variable=V]\n");
    return 2;
  }
  std::string dir = args[1];
  if (dir[0] != '/' && std::getenv("BUILD_WORKING_DIRECTORY")) dir = std::string(std::getenv("BUILD_WORKING_DIRECTORY")) + "/" + dir;
  psrt::ManifestStore store(dir);
  int64_t step = absl::GetFlag(FLAGS_step);
  if (step < 0) return psrt::List(store, absl::GetFlag(FLAGS_verify));
  return psrt::Show(store, step, absl::GetFlag(FLAGS_variable));
}
