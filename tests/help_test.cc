// `--help` on every binary: exit status 0, the usage, and the binary's own
// flags, shared ones included (--cluster_spec, --task, TLS), one line each.
// Before, chief/main and worker/main printed "No flags matched" and
// ps/server left out --cluster_spec, --task and the TLS flags.
#include <sys/wait.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/harness/process_harness.h"

namespace psrt {
namespace {

struct Binary {
  std::string path;
  std::vector<std::string> flags;   // each must have a line of its own
  std::vector<std::string> absent;  // linked in, but not this binary's
};

const std::vector<std::string> kDaemonFlags = {"cluster_spec", "task", "job_name", "tls_ca", "tls_cert",
                                               "tls_key", "auth_token_file", "max_concurrent_streams",
                                               "max_receive_message_mb"};
const std::vector<std::string> kJobFlags = {"max_job_file_mb", "max_model_layers", "max_graph_nodes"};

std::vector<std::string> Plus(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class HelpTest : public ::testing::TestWithParam<Binary> {};

TEST_P(HelpTest, ListsItsFlagsOneLineEachAndExitsZero) {
  const Binary& b = GetParam();
  auto d = testing::Daemon::Start(b.path, {testing::RunfilePath(b.path), "--help"});
  ASSERT_TRUE(d.ok()) << d.status();
  absl::StatusOr<int> status = (*d)->Wait(absl::Seconds(60));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << b.path << " wait status " << *status;
  EXPECT_TRUE((*d)->WaitForLine("Usage: ", absl::Seconds(1))) << b.path;
  EXPECT_TRUE((*d)->WaitForLine("Flags:", absl::Seconds(1))) << b.path;
  EXPECT_FALSE((*d)->WaitForLine("No flags matched", absl::ZeroDuration())) << b.path;
  for (const std::string& flag : b.flags) {
    // "  --name=DEFAULT  help": the name, its default and its help on one line.
    EXPECT_FALSE(
        (*d)->WaitForMatch("^  --" + flag + "=[^ ]*  [^ ].*[^ ]$", absl::ZeroDuration()).empty())
        << b.path << " --help has no line for --" << flag;
  }
  // Abseil's own flags are in every binary; only --helpfull lists them.
  for (const std::string& flag : Plus({"flagfile", "undefok"}, b.absent)) {
    EXPECT_TRUE((*d)->WaitForMatch("^  --" + flag + "=", absl::ZeroDuration()).empty())
        << b.path << " --help lists --" << flag;
  }
}

INSTANTIATE_TEST_SUITE_P(
    EveryBinary, HelpTest,
    ::testing::Values(
        Binary{"chief/main", Plus(Plus({"job", "checkpoint_dir", "restore", "http_port", "listen"}, kDaemonFlags),
                                  kJobFlags)},
        Binary{"ps/server", Plus({"snapshot_dir", "data_port", "tcp_data_plane", "max_memory_mb", "http_port",
                                  "http_listen", "http_token_file"},
                                 kDaemonFlags)},
        Binary{"worker/main", Plus({"device", "collective_port", "ps_transport", "threads", "http_port"}, kDaemonFlags)},
        // It makes no RPC: the TLS flags it links do nothing there.
        Binary{"worker/evaluator", Plus({"job", "checkpoint_dir", "http_port", "cluster_spec", "task"}, kJobFlags),
               {"tls_ca", "auth_token_file"}},
        Binary{"chief/checkpoints", {"step", "variable", "verify"}},
        Binary{"chief/export", Plus({"job", "checkpoint_dir", "format", "out", "include_optimizer"}, kJobFlags)},
        Binary{"chief/core/sim", {"seeds", "first", "seed"}},
        Binary{"deploy/local_cluster", {"job", "cluster_spec", "ps", "workers", "kill"}},
        Binary{"deploy/local_train", {"job", "device", "epochs"}}),
    [](const ::testing::TestParamInfo<Binary>& info) {
      std::string name = info.param.path;
      for (char& c : name) {
        if (c == '/') c = '_';
      }
      return name;
    });

}  // namespace
}  // namespace psrt
