#include "common/testing/python_tool.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

extern char** environ;

namespace psrt {
namespace testing {

absl::Status RunPythonTool(const std::string& script, const std::vector<std::string>& args,
                           const std::string& stdout_path) {
  return RunPythonToolWith(kVenvPython, script, args, stdout_path);
}

absl::Status RunPythonToolWith(const char* python, const std::string& script, const std::vector<std::string>& args,
                               const std::string& stdout_path) {
  if (access(python, X_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(python, " is missing: run deploy/setup.sh"));
  }
  std::string path = script;
  if (const char* dir = getenv("TEST_SRCDIR")) {
    const char* ws = getenv("TEST_WORKSPACE");
    path = absl::StrCat(dir, "/", ws ? ws : "psrt", "/", script);
  }
  std::vector<std::string> argv_s = {python, path};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (!stdout_path.empty()) {
    posix_spawn_file_actions_addopen(&actions, 1, stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
  }
  int rc = posix_spawn(&pid, python, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return absl::InternalError(absl::StrCat("cannot start ", python));
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat("python tool failed (status ", status,
                                            "): ", absl::StrJoin(argv_s, " ")));
  }
  return absl::OkStatus();
}

}  // namespace testing
}  // namespace psrt
