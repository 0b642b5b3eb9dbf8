#include "tests/harness/netns_partition.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "tests/bench/netns_pair.h"

namespace psrt {
namespace testing {
namespace {

using bench::RunCommand;

// 169.254.A.B: A in 100..199, B the first of a /30, from our pid.
std::string Address(int host) {
  const int pid = static_cast<int>(::getpid());
  return absl::StrCat("169.254.", 100 + (pid / 64) % 100, ".", (pid % 64) * 4 + host);
}

}  // namespace

NetnsPartition::NetnsPartition()
    : ns_(absl::StrCat("psrt-cut-", ::getpid())),
      outside_if_(absl::StrCat("psrtc", ::getpid(), "o")),
      inside_if_(absl::StrCat("psrtc", ::getpid(), "i")),
      outside_(Address(1)),
      inside_(Address(2)) {}

absl::StatusOr<std::unique_ptr<NetnsPartition>> NetnsPartition::Create() {
  std::unique_ptr<NetnsPartition> p(new NetnsPartition());
  absl::StatusOr<std::string> made = RunCommand({"ip", "netns", "add", p->ns_});
  if (!made.ok()) return absl::PermissionDeniedError(made.status().message());
  p->made_ = true;  // from here on the destructor removes what was made
  const std::vector<std::vector<std::string>> steps = {
      {"ip", "link", "add", p->outside_if_, "type", "veth", "peer", "name", p->inside_if_},
      {"ip", "link", "set", p->inside_if_, "netns", p->ns_},
      {"ip", "addr", "add", p->outside_ + "/30", "dev", p->outside_if_},
      {"ip", "-n", p->ns_, "addr", "add", p->inside_ + "/30", "dev", p->inside_if_},
      {"ip", "-n", p->ns_, "link", "set", "lo", "up"},
      {"ip", "link", "set", p->outside_if_, "up"},
      {"ip", "-n", p->ns_, "link", "set", p->inside_if_, "up"},
  };
  for (const auto& step : steps) {
    absl::StatusOr<std::string> r = RunCommand(step);
    if (!r.ok()) return r.status();
  }
  return p;
}

NetnsPartition::~NetnsPartition() {
  if (!made_) return;
  (void)RunCommand({"ip", "link", "del", outside_if_});  // made, not yet moved
  (void)RunCommand({"ip", "netns", "del", ns_});
}

std::vector<std::string> NetnsPartition::In(std::vector<std::string> command) const {
  return bench::NetnsPair::In(ns_, std::move(command));
}

absl::Status NetnsPartition::Cut() {
  return RunCommand({"ip", "-n", ns_, "link", "set", inside_if_, "down"}).status();
}

absl::Status NetnsPartition::Heal() {
  return RunCommand({"ip", "-n", ns_, "link", "set", inside_if_, "up"}).status();
}

}  // namespace testing
}  // namespace psrt
