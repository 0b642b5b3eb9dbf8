#include "common/input/streams.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"

namespace psrt {

namespace {

int64_t FloorDiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

}  // namespace

StreamPos StreamAt(const std::vector<StreamPos>& streams, int64_t base, int64_t step) {
  const int64_t m = static_cast<int64_t>(streams.size());
  const int64_t j = step - base;
  StreamPos p = streams[j - FloorDiv(j, m) * m];
  p.batch = std::max<int64_t>(0, p.batch + FloorDiv(j, m));
  return p;
}

std::vector<StreamPos> PositionsAt(const std::vector<StreamPos>& streams, int64_t base, int64_t step) {
  const int64_t m = static_cast<int64_t>(streams.size());
  const int64_t done = step - base;  // steps read since base (< 0: before it)
  std::vector<StreamPos> out = streams;
  for (int64_t r = 0; r < m; ++r) {
    // Steps j in [0, done) with j mod m == r, counted negative before base.
    out[r].batch = std::max<int64_t>(0, out[r].batch + FloorDiv(done - r - 1, m) + 1);
  }
  return out;
}

absl::Status Deal(int num_streams, const std::vector<int>& members,
                  const std::map<int, std::vector<StreamPos>>& held,
                  std::map<int, std::vector<StreamPos>>* dealt) {
  if (members.empty()) return absl::InvalidArgumentError("no worker to deal the data streams to");
  if (static_cast<int>(members.size()) > num_streams) {
    return absl::InvalidArgumentError(absl::StrCat(members.size(), " workers but only ", num_streams,
                                                   " data streams (job.failure.max_workers)"));
  }
  std::vector<StreamPos> orphans;
  std::set<int> seen;
  dealt->clear();
  for (int w : members) (*dealt)[w];
  for (const auto& [w, streams] : held) {
    const bool member = dealt->count(w) > 0;
    for (const StreamPos& s : streams) {
      if (s.index < 0 || s.index >= num_streams || !seen.insert(s.index).second) {
        return absl::InvalidArgumentError(absl::StrCat("data stream ", s.index, " held twice or out of [0, ",
                                                       num_streams, ")"));
      }
      (member ? (*dealt)[w] : orphans).push_back(s);
    }
  }
  for (int i = 0; i < num_streams; ++i) {
    if (!seen.count(i)) orphans.push_back(StreamPos{i, 0});
  }
  std::sort(orphans.begin(), orphans.end(), [](const StreamPos& a, const StreamPos& b) { return a.index < b.index; });
  auto fewest = [dealt]() {
    auto it = std::min_element(dealt->begin(), dealt->end(),
                               [](const auto& a, const auto& b) { return a.second.size() < b.second.size(); });
    return &it->second;
  };
  for (const StreamPos& s : orphans) fewest()->push_back(s);
  while (true) {
    auto most = std::max_element(dealt->begin(), dealt->end(),
                                 [](const auto& a, const auto& b) { return a.second.size() < b.second.size(); });
    std::vector<StreamPos>* least = fewest();
    if (most->second.size() <= least->size() + 1) break;
    least->push_back(most->second.back());
    most->second.pop_back();
  }
  return absl::OkStatus();
}

}  // namespace psrt
