// The chief as users start it, on job files no one should be able to make
// it choke on (issue #28): a 30 MB job of a million layers took the chief
// to 8.1 GB before anything refused it. Now the file's size is refused
// before it is parsed, and the model's layer count before anything is
// built, each naming the bound and the flag that sets it; the chief exits
// at once with status 2, its peak memory a few tens of MB.
#include <sys/wait.h>

#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/harness/process_harness.h"

namespace psrt {
namespace {

using testing::Daemon;
using testing::RunfilePath;

// A job of `layers` one-unit dense layers (about 30 bytes each).
std::string WriteJob(const std::string& name, int layers) {
  const std::string path = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name, ".pbtxt");
  std::ofstream out(path);
  out << "name: \"" << name << "\"\nmodel {\n  sequential {\n";
  for (int i = 0; i < layers; ++i) out << "    layer { dense { units: 1 } }\n";
  out << "  }\n  loss { kind: SOFTMAX_CROSS_ENTROPY }\n}\n"
      << "input { format: LIBSVM batch_size: 1 train { files: \"/dev/null\" } }\n"
      << "optimizer { sgd { learning_rate: 0.1 } }\nsteps: 1\n";
  return path;
}

// Runs the chief on `job` under /usr/bin/time; its exit status, and its
// peak RSS in KiB in *peak_kb.
int RunChief(const std::string& job, const std::vector<std::string>& flags, const std::string& want,
             int64_t* peak_kb) {
  auto cluster = testing::MakeTestCluster(1, 1, "bounds");
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  std::vector<std::string> argv = {"/usr/bin/time", "-f", "peak rss %M KiB", RunfilePath("chief/main"),
                                   "--cluster_spec=" + cluster->spec_path, "--task=chief:0", "--job=" + job};
  argv.insert(argv.end(), flags.begin(), flags.end());
  auto chief = Daemon::Start("chief", argv);
  EXPECT_TRUE(chief.ok()) << chief.status();
  absl::StatusOr<int> status = (*chief)->Wait(absl::Minutes(1));
  EXPECT_TRUE(status.ok()) << "the chief did not exit: " << status.status();
  if (!status.ok()) return -1;
  EXPECT_FALSE((*chief)->WaitForMatch(want, absl::Seconds(10)).empty()) << "no line matching " << want;
  const std::string rss = (*chief)->WaitForMatch("^peak rss [0-9]+ KiB$", absl::Seconds(10));
  *peak_kb = -1;
  if (!rss.empty()) (void)absl::SimpleAtoi(rss.substr(9, rss.size() - 13), peak_kb);
  // /usr/bin/time passes on the chief's exit status.
  return WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
}

TEST(JobBoundsTest, AJobFileLargerThanTheBoundIsRefusedBeforeItIsParsed) {
  const std::string job = WriteJob("million_layers", 1000000);  // about 30 MB
  int64_t peak_kb = 0;
  EXPECT_EQ(RunChief(job, {}, "error: .*million_layers.pbtxt: more than the bound of 16777216 bytes for a job file "
                              "\\(--max_job_file_mb\\)",
                     &peak_kb),
            2);
  std::cout << "chief peak RSS on a 30 MB job file: " << peak_kb << " KiB\n";
  EXPECT_GT(peak_kb, 0);
  EXPECT_LT(peak_kb, 200 * 1024);
}

TEST(JobBoundsTest, AModelOfMoreLayersThanTheBoundIsRefusedBeforeItIsBuilt) {
  const std::string job = WriteJob("many_layers", 20000);  // about 600 KB
  int64_t peak_kb = 0;
  EXPECT_EQ(RunChief(job, {}, "error: .*many_layers.pbtxt: model.sequential has 20000 layers, more than the bound "
                              "of 10000 \\(--max_model_layers\\)",
                     &peak_kb),
            2);
  std::cout << "chief peak RSS on a job of 20,000 layers: " << peak_kb << " KiB\n";
  EXPECT_LT(peak_kb, 200 * 1024);
  // A bad flag is named too.
  EXPECT_EQ(RunChief(job, {"--max_job_file_mb=0"}, "error: --max_job_file_mb=0: want 1 to 1048576", &peak_kb), 2);
}

}  // namespace
}  // namespace psrt
