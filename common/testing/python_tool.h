// Runs a Python script from one of the test-only virtual environments that
// deploy/setup.sh makes (/opt/psrt/venv, with PyPI's tensorboard and
// tfrecord; /opt/psrt/venv-tf, with TensorFlow itself), so tests can check
// our files against code we did not write.
#ifndef PSRT_COMMON_TESTING_PYTHON_TOOL_H_
#define PSRT_COMMON_TESTING_PYTHON_TOOL_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace psrt {
namespace testing {

inline constexpr char kVenvPython[] = "/opt/psrt/venv/bin/python";
inline constexpr char kVenvTfPython[] = "/opt/psrt/venv-tf/bin/python";

// Runs `script` (a runfiles-relative path such as "tests/tools/x.py") with
// `args` under `interpreter`; fails with the script's exit code. Its stdout
// goes to `stdout_path` if given, else to the test log.
absl::Status RunPythonTool(const std::string& script, const std::vector<std::string>& args,
                           const std::string& stdout_path = "",
                           const std::string& interpreter = kVenvPython);

}  // namespace testing
}  // namespace psrt

#endif  // PSRT_COMMON_TESTING_PYTHON_TOOL_H_
