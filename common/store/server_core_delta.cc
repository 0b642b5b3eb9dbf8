// Incremental checkpoints in the parameter server: which snapshot is a
// delta, and the writer's check that a delta's base was written.
#include "absl/strings/str_cat.h"
#include "common/store/server_core.h"
#include "glog/logging.h"

namespace psrt {

bool ParameterServerCore::DeltaNextLocked(const SnapshotRequest& req, const std::vector<Variable*>& vars,
                                          int64_t* base_step) {
  std::vector<std::string> names;
  names.reserve(vars.size());
  for (const Variable* v : vars) names.push_back(v->def().name());
  // Read and cleared at every snapshot: a failed write breaks the chain.
  const bool broken = chain_broken_.exchange(false);
  const bool delta = req.full_every() > 0 && chain_.valid && !broken && chain_.checkpoint == req.checkpoint() &&
                     chain_.variables == names && chain_.step < req.step() && chain_.deltas < req.full_every();
  chain_.valid = true;
  chain_.checkpoint = req.checkpoint();
  chain_.variables = std::move(names);
  chain_.deltas = delta ? chain_.deltas + 1 : 0;
  *base_step = delta ? chain_.step : 0;
  chain_.step = req.step();
  if (delta) VLOG(1) << "snapshot of step " << req.step() << ": a delta on step " << *base_step;
  return delta;
}

absl::StatusOr<int64_t> ParameterServerCore::WriteLinked(const WriteJob& job) {
  absl::StatusOr<int64_t> bytes;
  if (job.snapshot.delta &&
      (job.store != last_written_store_ || job.snapshot.base_step != last_written_step_)) {
    // The rows touched before the base's pause are in no snapshot but the
    // base: without it this delta is worthless.
    bytes = absl::AbortedError(absl::StrCat("snapshot of step ", job.snapshot.step, " not written: it is a delta on step ",
                                            job.snapshot.base_step, ", which was not written; the next snapshot is full"));
  } else {
    bytes = job.store->Write(job.snapshot);
  }
  if (bytes.ok()) {
    last_written_store_ = job.store;
    last_written_step_ = job.snapshot.step;
  } else {
    last_written_store_ = nullptr;
    last_written_step_ = -1;
    chain_broken_.store(true);
  }
  return bytes;
}

}  // namespace psrt
