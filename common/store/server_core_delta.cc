// Incremental checkpoints in the parameter server: which snapshot is a
// delta. The writer's check that a delta's base was written is
// SnapshotWriter::WriteLinked.
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
  const bool broken = writer_->TakeChainBroken();
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

}  // namespace psrt
