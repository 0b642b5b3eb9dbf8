#include "common/cluster_spec.h"

#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

using ::testing::HasSubstr;

constexpr char kGood[] = R"({"chief": ["localhost:2220"],
  "ps": ["localhost:2221", "localhost:2222"],
  "worker": ["127.0.0.1:2223", "[::1]:2224"]})";

std::string ErrorOf(absl::string_view json) {
  auto spec = ClusterSpec::FromJson(json, "spec.json");
  EXPECT_FALSE(spec.ok()) << json;
  return std::string(spec.status().message());
}

TEST(ClusterSpecTest, ParsesBareClusterAndTfConfigForms) {
  auto spec = ClusterSpec::FromJson(kGood, "spec.json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->NumTasks("ps"), 2);
  EXPECT_EQ(spec->NumTasks("evaluator"), 0);
  EXPECT_EQ(*spec->AddressOf(MakeTaskId("worker", 1)), "[::1]:2224");
  auto tasks = spec->AllTasks();
  ASSERT_EQ(tasks.size(), 5u);
  EXPECT_EQ(TaskName(tasks[0]), "chief:0");
  EXPECT_EQ(TaskName(tasks[4]), "worker:1");

  auto tf = ClusterSpec::FromJson(
      absl::StrCat(R"({"cluster": )", kGood, R"(, "task": {"type": "ps", "index": 1},
                   "environment": "cloud"})"),
      "TF_CONFIG");
  ASSERT_TRUE(tf.ok()) << tf.status();
  EXPECT_EQ(tf->def().DebugString(), spec->def().DebugString());

  auto again = ClusterSpec::FromJson(spec->ToJson(), "round trip");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->def().DebugString(), spec->def().DebugString());
}

TEST(ClusterSpecTest, AcceptsAClusterWithoutPsForMirroredStrategies) {
  absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromJson(R"({"chief": ["a:1"], "worker": ["b:2", "c:3"]})", "spec");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->NumTasks("ps"), 0);
  EXPECT_EQ(spec->NumTasks("worker"), 2);
}

TEST(ClusterSpecTest, RefusesBadSpecsNamingTheField) {
  EXPECT_THAT(ErrorOf(R"({"ps": ["a:1"], "worker": ["b:2"]})"), HasSubstr("chief: missing"));
  EXPECT_THAT(ErrorOf(R"({"chief": ["a:1", "c:3"], "ps": ["b:2"], "worker": ["d:4"]})"),
              HasSubstr("exactly one chief"));
  EXPECT_THAT(ErrorOf(R"({"chief": ["a:1"], "ps": ["b:2"]})"), HasSubstr("worker: missing"));
  EXPECT_THAT(ErrorOf(R"({"chief": ["a:1"], "ps": ["a:1"], "worker": ["b:2"]})"),
              HasSubstr("ps[0]: duplicate address a:1 (also chief[0])"));
  EXPECT_THAT(ErrorOf(R"({"chief": ["a:1"], "ps": ["b"], "worker": ["c:2"]})"),
              HasSubstr("ps[0]: address \"b\" has no :port"));
  EXPECT_THAT(ErrorOf(R"({"chief": ["a:1"], "ps": ["b:99999"], "worker": ["c:2"]})"),
              HasSubstr("port must be 1..65535"));
  EXPECT_THAT(ErrorOf(R"({"chief": ["a:1"], "ps": [":5"], "worker": ["c:2"]})"),
              HasSubstr("has no host"));
  EXPECT_THAT(ErrorOf(R"({"chief": ["a:1"], "ps": ["::1:5"], "worker": ["c:2"]})"),
              HasSubstr("brackets"));
  EXPECT_THAT(ErrorOf(R"({"chief": ["a:1"], "ps": ["b:2"], "worker": ["c:3"], "master": ["d:4"]})"),
              HasSubstr("spec.json: master: both \"chief\" and \"master\" (Kubeflow's name for the chief)"));
  EXPECT_THAT(ErrorOf(R"({"boss": ["a:1"], "ps": ["b:2"], "worker": ["c:3"]})"),
              HasSubstr("boss: unknown job (expected one of chief, ps, worker, evaluator; master means chief)"));
  EXPECT_THAT(ErrorOf(R"({"chief": "a:1", "ps": ["b:2"], "worker": ["c:3"]})"),
              HasSubstr("chief: must be a list"));
  EXPECT_THAT(ErrorOf(R"({"chief": [1], "ps": ["b:2"], "worker": ["c:3"]})"),
              HasSubstr("chief[0]: must be a \"host:port\" string"));
  EXPECT_THAT(ErrorOf(R"({"cluster": {"chief": ["a:1"], "ps": ["b:2"], "worker": ["c:3"]}, "tsak": {}})"),
              HasSubstr("tsak: unknown key"));
  EXPECT_THAT(ErrorOf(R"({"task": {"type": "ps"}})"), HasSubstr("cluster: missing"));
  EXPECT_THAT(ErrorOf("{\"chief\": [\"a:1\""), HasSubstr("spec.json: not a JSON object"));
}

// Both found by tests/fuzz/cluster_spec_fuzzer.
TEST(ClusterSpecTest, ToJsonEscapesWhatTheParserAccepted) {
  auto spec = ClusterSpec::FromJson(R"({"chief": ["a\"b:1"], "ps": ["c\\d:2"], "worker": ["e\u0001f:3"]})",
                                    "spec.json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto again = ClusterSpec::FromJson(spec->ToJson(), "again");
  ASSERT_TRUE(again.ok()) << again.status() << " in " << spec->ToJson();
  EXPECT_EQ(again->def().SerializeAsString(), spec->def().SerializeAsString());
}

TEST(ClusterSpecTest, RefusesATaskIndexOutOfIntRange) {
  for (const char* index : {"1e300", "4294967296", "2147483648", "-1", "0.5"}) {
    std::string json = absl::StrCat(
        R"({"cluster": {"chief": ["a:1"], "ps": ["b:2"], "worker": ["c:3"]}, "task": {"type": "ps", "index": )",
        index, "}}");
    auto config = LoadTaskConfig("", "", json.c_str());
    ASSERT_FALSE(config.ok()) << index;
    EXPECT_THAT(std::string(config.status().message()), HasSubstr("task.index")) << index;
  }
}

TEST(ClusterSpecTest, TaskIds) {
  EXPECT_EQ(TaskName(*ParseTaskId("ps:3")), "ps:3");
  EXPECT_EQ(TaskName(*ParseTaskId("/job:worker/task:1")), "worker:1");
  EXPECT_THAT(std::string(ParseTaskId("ps").status().message()), HasSubstr("JOB:INDEX"));
  EXPECT_THAT(std::string(ParseTaskId("ps:-1").status().message()), HasSubstr("JOB:INDEX"));
  EXPECT_THAT(std::string(ParseTaskId("gpu:0").status().message()), HasSubstr("unknown job \"gpu\""));
  auto spec = ClusterSpec::FromJson(kGood, "s");
  EXPECT_THAT(std::string(spec->AddressOf(MakeTaskId("ps", 2)).status().message()),
              HasSubstr("index out of range"));
  EXPECT_THAT(std::string(spec->AddressOf(MakeTaskId("evaluator", 0)).status().message()),
              HasSubstr("no job \"evaluator\""));
}

class LoadTaskConfigTest : public ::testing::Test {
 protected:
  std::string WriteSpec(const std::string& text) {
    std::string path = absl::StrCat(::testing::TempDir(), "/spec_", counter_++, ".json");
    std::ofstream(path) << text;
    return path;
  }
  int counter_ = 0;
};

TEST_F(LoadTaskConfigTest, FlagsFileAndTfConfig) {
  std::string path = WriteSpec(kGood);
  auto c = LoadTaskConfig(path, "ps:1", nullptr);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->address, "localhost:2222");

  std::string tf = absl::StrCat(R"({"cluster": )", kGood, R"(, "task": {"type": "worker", "index": 0}})");
  c = LoadTaskConfig("", "", tf.c_str());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(TaskName(c->task), "worker:0");
  EXPECT_EQ(c->address, "127.0.0.1:2223");

  // The flag overrides TF_CONFIG's task; the file's cluster with TF_CONFIG's task.
  c = LoadTaskConfig("", "chief:0", tf.c_str());
  EXPECT_EQ(c->address, "localhost:2220");
  c = LoadTaskConfig(path, "", tf.c_str());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(TaskName(c->task), "worker:0");
}

TEST_F(LoadTaskConfigTest, ErrorsSayWhatIsMissing) {
  EXPECT_THAT(std::string(LoadTaskConfig("", "ps:0", nullptr).status().message()),
              HasSubstr("--cluster_spec=FILE or set TF_CONFIG"));
  EXPECT_THAT(std::string(LoadTaskConfig(WriteSpec(kGood), "", nullptr).status().message()),
              HasSubstr("no task"));
  EXPECT_THAT(std::string(LoadTaskConfig(WriteSpec(kGood), "ps:7", nullptr).status().message()),
              HasSubstr("index out of range"));
  EXPECT_EQ(LoadTaskConfig("/nonexistent/spec.json", "ps:0", nullptr).status().code(),
            absl::StatusCode::kNotFound);
  std::string bad_tf = R"({"cluster": {"chief": ["a:1"], "ps": ["b:2"], "worker": ["c:3"]},
                           "task": {"type": "ps", "index": -1}})";
  EXPECT_THAT(std::string(LoadTaskConfig("", "", bad_tf.c_str()).status().message()),
              HasSubstr("TF_CONFIG: task.index"));
  std::string bad_type = R"({"cluster": {"chief": ["a:1"], "ps": ["b:2"], "worker": ["c:3"]},
                             "task": {"type": "boss"}})";
  EXPECT_THAT(std::string(LoadTaskConfig("", "", bad_type.c_str()).status().message()),
              HasSubstr("task.type: unknown job"));
}

// Kubeflow's TFJob names the chief "master" (its older name, still what a
// TFJob with a Master replica spec gives): the same task as "chief".
TEST_F(LoadTaskConfigTest, KubeflowsMasterIsTheChief) {
  const std::string tf_config = R"({"cluster": {"master": ["m:1"], "ps": ["p:2"], "worker": ["w:3"]},
                                    "task": {"type": "master", "index": 0}, "environment": "cloud"})";
  auto config = LoadTaskConfig("", "", tf_config.c_str());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(TaskName(config->task), "chief:0");
  EXPECT_EQ(config->address, "m:1");
  EXPECT_EQ(*config->cluster.AddressOf(MakeTaskId("chief", 0)), "m:1");
  EXPECT_EQ(config->cluster.ToJson(), R"({"chief": ["m:1"], "ps": ["p:2"], "worker": ["w:3"]})");
  // A worker of that cluster finds the chief.
  auto worker = LoadTaskConfig("", "worker:0", tf_config.c_str());
  ASSERT_TRUE(worker.ok()) << worker.status();
  EXPECT_EQ(*worker->cluster.AddressOf(MakeTaskId("chief", 0)), "m:1");
  // --task=master:0 and TensorFlow's /job:master/task:0 too.
  EXPECT_EQ(TaskName(*ParseTaskId("master:0")), "chief:0");
  EXPECT_EQ(TaskName(*ParseTaskId("/job:master/task:0")), "chief:0");
  EXPECT_THAT(std::string(LoadTaskConfig(WriteSpec(R"({"master": ["m:1", "m:2"], "worker": ["w:3"]})"), "chief:0",
                                         nullptr)
                              .status()
                              .message()),
              HasSubstr("a cluster has exactly one chief"));
}

// Kubeflow's enableDynamicWorker gives each worker a "sparseCluster" naming
// only itself: refused, saying what to give instead.
TEST_F(LoadTaskConfigTest, SparseClusterIsRefusedSayingWhatToUseInstead) {
  const std::string tf_config = R"({"sparseCluster": {"chief": ["m:1"], "ps": ["p:2"], "worker": {"1": "w:3"}},
                                    "task": {"type": "worker", "index": 1}})";
  absl::StatusOr<TaskConfig> config = LoadTaskConfig("", "", tf_config.c_str());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(config.status().message(),
            "TF_CONFIG: sparseCluster: not supported: psrt needs every task's address. Give a \"cluster\" "
            "instead (Kubeflow: leave the TFJob's enableDynamicWorker off) or --cluster_spec=FILE; for "
            "workers that join a running job, set job.failure.max_workers and give each joiner a spec that "
            "names it (deploy/DEPLOYMENT.md, elastic workers)");
}

}  // namespace
}  // namespace psrt
