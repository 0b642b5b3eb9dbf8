// Small helpers shared by the fuzz harnesses.
#ifndef PSRT_TESTS_FUZZ_FUZZ_UTIL_H_
#define PSRT_TESTS_FUZZ_FUZZ_UTIL_H_

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace psrt {
namespace fuzz {

// An invariant of the code under test; aborts (a crash to the fuzzer) with
// the reason on stderr. Meant for properties no input may break.
inline void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz invariant failed: %s\n", what);
    std::abort();
  }
}

// A scratch file path private to this process, for code that reads files by
// name (readers of TFRecord, libsvm, CSV, IDX). Under `bazel test` it lies
// in TEST_TMPDIR.
inline std::string ScratchPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/psrt_fuzz_" +
         std::to_string(getpid()) + "_" + name;
}

// Writes `size` bytes to `path`, replacing it; aborts if it cannot (the
// harness, not the code under test, is broken then).
inline void WriteFile(const std::string& path, const void* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  Check(f != nullptr, "cannot create scratch file");
  Check(size == 0 || std::fwrite(data, 1, size, f) == size, "cannot write scratch file");
  Check(std::fclose(f) == 0, "cannot close scratch file");
}

inline std::string ReadFile(const std::string& path) {
  std::string out;
  FILE* f = std::fopen(path.c_str(), "rb");
  Check(f != nullptr, "cannot reopen scratch file");
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

}  // namespace fuzz
}  // namespace psrt

#endif  // PSRT_TESTS_FUZZ_FUZZ_UTIL_H_
