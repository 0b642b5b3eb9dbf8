// NetnsPartition: a network namespace joined to the test's own by a veth
// pair, so that one daemon of a test cluster can be cut off from all the
// others (the veth taken down) while it runs on, and joined again: a
// partition, not a crash. Our side is outside(), the namespace's inside()
// (169.254.A.B/30, link-local, picked from our pid so runs side by side do
// not meet). Made with `ip`, removed by the destructor (deleting the
// namespace deletes its veth end and with it the pair).
//
//   auto p = NetnsPartition::Create();
//   if (!p.ok()) GTEST_SKIP() << p.status();  // no rights to make namespaces
//   Daemon::Start("ps:0", (*p)->In({RunfilePath("ps/server"), ...}));
//   ASSERT_TRUE((*p)->Cut().ok());  ...  ASSERT_TRUE((*p)->Heal().ok());
#ifndef PSRT_TESTS_HARNESS_NETNS_PARTITION_H_
#define PSRT_TESTS_HARNESS_NETNS_PARTITION_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace psrt {
namespace testing {

class NetnsPartition {
 public:
  // PERMISSION_DENIED (with `ip`'s words) when `ip netns add` fails: no
  // rights; another error naming the command that failed.
  static absl::StatusOr<std::unique_ptr<NetnsPartition>> Create();
  ~NetnsPartition();

  const std::string& outside() const { return outside_; }
  const std::string& inside() const { return inside_; }
  // argv running `command` inside the namespace.
  std::vector<std::string> In(std::vector<std::string> command) const;
  // The namespace's end of the veth down (every packet either way is
  // lost) or up again.
  absl::Status Cut();
  absl::Status Heal();

 private:
  NetnsPartition();
  const std::string ns_, outside_if_, inside_if_, outside_, inside_;
  bool made_ = false;
};

}  // namespace testing
}  // namespace psrt

#endif  // PSRT_TESTS_HARNESS_NETNS_PARTITION_H_
