// An ASYNC worker SIGKILLed mid-run and started again (a new process, a
// new incarnation), with real processes: the chief, two PS and two workers
// train the Fashion-MNIST MLP. The chief's record of the killed worker's
// step lags what it pushed; the chief asks the PS how far each of its data
// streams is applied (PsStatusResponse.stream_next_batch) and starts the
// new process after the last batch every PS applied, so no batch is pushed
// twice (issue #27). Every worker logs the (data stream, batch) of each
// step it pushed (--data_log): each stream's batches must be trained once,
// from 0 without a gap, across the kill.
#include <signal.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>

#include "absl/strings/str_cat.h"
#include "tests/harness/training_cluster.h"

namespace psrt {
namespace testing {
namespace {

constexpr int kSteps = 1400;

class WorkerKillExactlyOnceTest : public TrainingClusterTest {};

TEST_F(WorkerKillExactlyOnceTest, AKilledAsyncWorkerPushesNoBatchTwice) {
  Setup(/*ps=*/2, /*workers=*/2, ConsistencyDef::ASYNC, /*steps=*/kSteps);
  // Room to start the new process before the job goes on without it.
  job_.mutable_failure()->set_heartbeat_timeout_ms(60000);
  WriteJob();
  auto log = [this](const std::string& name) { return absl::StrCat(dir_, "-data-", name, ".log"); };
  auto ps0 = StartPs(0);
  auto ps1 = StartPs(1);
  // SIGKILLed by itself at the start of step 500 (--kill_at_step): the
  // chief's record, from its last poll, lags the steps it pushed.
  auto w0 = StartWorker(0, {"--data_log=" + log("0a"), "--kill_at_step=500"});
  auto w1 = StartWorker(1, {"--data_log=" + log("1")});
  auto chief = StartChief();
  ASSERT_TRUE(chief && w0 && w1 && ps0 && ps1);
  ExitCode(w0.get(), absl::Minutes(2));
  w0 = StartWorker(0, {"--data_log=" + log("0b")});
  ASSERT_TRUE(w0);
  const std::string line = chief->WaitForMatch("worker:0 \\(re\\)started; starting it at", absl::Minutes(1));
  ASSERT_FALSE(line.empty());
  std::smatch m;
  ASSERT_TRUE(std::regex_search(line, m, std::regex("at step ([0-9]+) \\(recorded ([0-9]+)\\)"))) << line;
  std::cerr << "FIGURE: the killed worker started at step " << m[1] << ", its record said " << m[2] << std::endl;
  EXPECT_EQ(std::stoll(m[1]), 500);
  EXPECT_EQ(ExitCode(chief.get()), 0);
  const std::string summary = Summary();
  EXPECT_GE(Field(summary, "steps"), kSteps) << summary;

  const std::map<int64_t, std::multiset<int64_t>> trained = ReadDataLogs({log("0a"), log("0b"), log("1")});
  EXPECT_EQ(trained.size(), 2u);
  const int64_t total = ExpectEachBatchOnce(trained);
  EXPECT_GE(total, 2 * kSteps);
  std::cerr << "FIGURE: " << total << " batches over " << trained.size() << " streams, each once" << std::endl;
}

}  // namespace
}  // namespace testing
}  // namespace psrt
