// Runs a Python script from the test-only virtual environment that
// deploy/setup.sh makes (/opt/psrt/venv, with PyPI's tensorboard and
// tfrecord), so tests can check our files against code we did not write.
#ifndef PSRT_COMMON_TESTING_PYTHON_TOOL_H_
#define PSRT_COMMON_TESTING_PYTHON_TOOL_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace psrt {
namespace testing {

inline constexpr char kVenvPython[] = "/opt/psrt/venv/bin/python";
// The second test-only environment (deploy/setup.sh): real TensorFlow,
// ONNX Runtime and onnx, which need NumPy 2 where the first keeps its pins.
inline constexpr char kVenvTfPython[] = "/opt/psrt/venv-tf/bin/python";

// Runs `script` (a runfiles-relative path such as "tests/tools/x.py") with
// `args`; fails with the script's exit code. Its stdout goes to
// `stdout_path` if given, else to the test log.
absl::Status RunPythonTool(const std::string& script, const std::vector<std::string>& args,
                           const std::string& stdout_path = "");
// The same with another interpreter, e.g. kVenvTfPython.
absl::Status RunPythonToolWith(const char* python, const std::string& script, const std::vector<std::string>& args,
                               const std::string& stdout_path = "");

}  // namespace testing
}  // namespace psrt

#endif  // PSRT_COMMON_TESTING_PYTHON_TOOL_H_
