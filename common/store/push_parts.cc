#include "common/store/push_parts.h"

#include "absl/strings/str_cat.h"
#include "common/transport/ps_types.h"

namespace psrt {

absl::Status PushParts::Check(const RequestId& id) {
  if (id.bucket() < 0 || id.bucket() > kMaxPushBuckets) {
    return absl::InvalidArgumentError(absl::StrCat("request id: bucket ", id.bucket(),
                                                   " is outside [0, ", kMaxPushBuckets, "]"));
  }
  if (id.bucket() == 0 && id.last_bucket()) {
    return absl::InvalidArgumentError("request id: last_bucket is set on a push that is not in buckets (bucket 0)");
  }
  return absl::OkStatus();
}

bool PushParts::Seen(const RequestId& id) const {
  if (id.bucket() == 0) return false;
  auto w = workers_.find(id.worker());
  if (w == workers_.end() || w->second.incarnation != id.worker_incarnation()) return false;
  auto s = w->second.steps.find(id.step());
  return s != w->second.steps.end() && s->second.taken.count(id.bucket()) > 0;
}

absl::StatusOr<bool> PushParts::Take(const RequestId& id, NamedTensors* hold) {
  if (id.bucket() == 0) return true;
  Worker& w = workers_[id.worker()];
  if (w.incarnation != id.worker_incarnation()) {
    w.incarnation = id.worker_incarnation();
    w.steps.clear();
  }
  auto found = w.steps.find(id.step());
  const Step empty;
  const Step& old = found == w.steps.end() ? empty : found->second;
  auto refuse = [&](absl::string_view why) {
    if (found == w.steps.end() && w.steps.empty()) workers_.erase(id.worker());
    return absl::InvalidArgumentError(absl::StrCat("request id: bucket ", id.bucket(), " of worker ", id.worker(),
                                                   "'s step ", id.step(), " ", why));
  };
  if (old.last > 0 && id.bucket() > old.last) {
    return refuse(absl::StrCat("is past the step's last bucket ", old.last));
  }
  if (id.last_bucket() && old.last > 0 && id.bucket() != old.last) {
    return refuse(absl::StrCat("says it is the last, but bucket ", old.last, " was"));
  }
  if (id.last_bucket() && !old.taken.empty() && *old.taken.rbegin() > id.bucket()) {
    return refuse(absl::StrCat("says it is the last, but bucket ", *old.taken.rbegin(), " was taken"));
  }
  Step& s = w.steps[id.step()];
  s.taken.insert(id.bucket());
  if (id.last_bucket()) s.last = id.bucket();
  if (hold != nullptr) {
    for (auto& g : *hold) s.held.push_back(std::move(g));
    hold->clear();
  }
  if (s.last > 0 && static_cast<int>(s.taken.size()) == s.last) {
    if (hold != nullptr) *hold = std::move(s.held);
    w.steps.erase(id.step());
    return true;
  }
  while (w.steps.size() > kOpenSteps) w.steps.erase(w.steps.begin());
  return false;
}

}  // namespace psrt
