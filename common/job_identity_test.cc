// A registering task's job identity against the chief's: equal names and
// agreeing specs pass (a joiner's spec may name more tasks); anything else
// is refused naming the task, both sides and the first difference.
#include "common/job_identity.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

using ::testing::HasSubstr;

JobIdentity Identity(const std::string& name, const std::string& json) {
  auto spec = ClusterSpec::FromJson(json, "spec.json");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return MakeJobIdentity(name, spec.ok() ? *spec : ClusterSpec());
}

constexpr char kSpec[] = R"({"chief": ["c:1"], "ps": ["p:1", "p:2"], "worker": ["w:1", "w:2"]})";

TEST(JobIdentityTest, TheSameJobPasses) {
  EXPECT_TRUE(CheckSameJob(Identity("", kSpec), Identity("", kSpec), MakeTaskId("ps", 0)).ok());
  EXPECT_TRUE(CheckSameJob(Identity("mnist", kSpec), Identity("mnist", kSpec), MakeTaskId("ps", 0)).ok());
  EXPECT_EQ(ClusterDigest(Identity("", kSpec).cluster()), ClusterDigest(Identity("x", kSpec).cluster()));
}

TEST(JobIdentityTest, AnElasticJoinersLargerSpecPasses) {
  JobIdentity joiner =
      Identity("", R"({"chief": ["c:1"], "ps": ["p:1", "p:2", "p:3"], "worker": ["w:1", "w:2", "w:3"]})");
  EXPECT_TRUE(CheckSameJob(Identity("", kSpec), joiner, MakeTaskId("worker", 2)).ok());
  EXPECT_NE(ClusterDigest(joiner.cluster()), ClusterDigest(Identity("", kSpec).cluster()));
}

TEST(JobIdentityTest, AnotherJobNameIsRefusedNamingBoth) {
  absl::Status s = CheckSameJob(Identity("mnist", kSpec), Identity("cifar", kSpec), MakeTaskId("worker", 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(),
            "worker:1 belongs to job 'cifar', but this chief runs job 'mnist': start every task of a job with "
            "the same --job_name");
  s = CheckSameJob(Identity("mnist", kSpec), Identity("", kSpec), MakeTaskId("ps", 0));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("ps:0 belongs to an unnamed job (no --job_name), but this chief runs job 'mnist'"));
}

TEST(JobIdentityTest, AnotherClusterIsRefusedNamingTheFirstDifference) {
  // The second cluster's spec names the first's chief by mistake.
  JobIdentity other = Identity("", R"({"chief": ["c:1"], "ps": ["q:1", "q:2"], "worker": ["x:1", "x:2"]})");
  absl::Status s = CheckSameJob(Identity("", kSpec), other, MakeTaskId("ps", 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(), "ps:1 belongs to another cluster: its cluster spec (digest " +
                             ClusterDigest(other.cluster()) + ") has ps:0 at q:1, this chief's (digest " +
                             ClusterDigest(Identity("", kSpec).cluster()) +
                             ") has ps:0 at p:1: give every task of a job the chief's cluster spec (a joiner's "
                             "may name more tasks)");
  JobIdentity other_chief = Identity("", R"({"chief": ["c:2"], "ps": ["p:1", "p:2"], "worker": ["w:1", "w:2"]})");
  EXPECT_THAT(std::string(CheckSameJob(Identity("", kSpec), other_chief, MakeTaskId("ps", 0)).message()),
              HasSubstr("has chief:0 at c:2, this chief's"));
  EXPECT_THAT(std::string(CheckSameJob(Identity("", kSpec), JobIdentity(), MakeTaskId("ps", 0)).message()),
              HasSubstr("ps:0's cluster spec names no chief"));
}

}  // namespace
}  // namespace psrt
