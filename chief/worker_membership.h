// WorkerMembership: elastic workers under the parameter-server strategy.
// Workers join (beyond the spec, up to failure.max_workers) and leave (for
// good, or dead past the policy); the data streams are dealt again at a
// step boundary, so no example of an epoch is skipped or read twice
// (worker_membership.cc says how).
#ifndef PSRT_CHIEF_WORKER_MEMBERSHIP_H_
#define PSRT_CHIEF_WORKER_MEMBERSHIP_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "chief/chief_cluster.h"

namespace psrt {

class WorkerMembership {
 public:
  explicit WorkerMembership(ChiefCluster* cluster) : cluster_(*cluster) {}

  // Workers registered beyond the views get a view and join; a worker that
  // said it leaves is taken out. Returns true when it changed the
  // membership (then the caller's pass is over).
  absl::StatusOr<bool> Watch();
  // Every member stopped at a step boundary, the streams dealt again among
  // the members (a leaver's go on where it stopped), the SYNC group
  // resized and every member started again under a new generation.
  // `joining`: workers (removed or new) that become members now.
  absl::Status Change(const std::string& why, const std::vector<int>& joining);

 private:
  // Whether worker `w`, said to have left, still answers as the same
  // process (then it has not).
  bool StillServing(WorkerView* w);
  // Starts each of `joining` on a run of no step with the streams it is
  // about to get, so that it decodes them before the others pause; its real
  // start reads them forward from there.
  void WarmUpJoiners(const std::vector<int>& joining);
  // SYNC: the step the group goes on at after a membership change, the
  // PS's oldest step not applied (GroupStep, from the workers, when a PS
  // does not answer).
  int64_t SyncGroupStep(const std::vector<bool>& paused);

  ChiefCluster& cluster_;
};

}  // namespace psrt

#endif  // PSRT_CHIEF_WORKER_MEMBERSHIP_H_
