// Tmpfs: a tmpfs of a given size mounted at a directory while the object
// lives, so that a test can give a daemon a disk that fills up (a filler
// file written until ENOSPC) without touching the machine's own disks.
// Mounting needs root and mount rights: Mount returns nullptr (and says
// why on stderr) where this process has none, and the test skips.
//
//   std::unique_ptr<Tmpfs> disk = Tmpfs::Mount(dir + "/ckpt/ps-1", "64m");
//   if (disk == nullptr) GTEST_SKIP() << "no mount rights";
#ifndef PSRT_TESTS_HARNESS_TMPFS_H_
#define PSRT_TESTS_HARNESS_TMPFS_H_

#include <sys/mount.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"

namespace psrt {
namespace testing {

class Tmpfs {
 public:
  // `size` as mount(8) takes it: "64m". `dir` is created.
  static std::unique_ptr<Tmpfs> Mount(const std::string& dir, const std::string& size) {
    if (std::system(absl::StrCat("mkdir -p '", dir, "'").c_str()) != 0) return nullptr;
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, ("size=" + size).c_str()) != 0) {
      std::cerr << "mount tmpfs at " << dir << ": " << std::strerror(errno) << "\n";
      return nullptr;
    }
    return std::unique_ptr<Tmpfs>(new Tmpfs(dir));
  }
  // Lazily: a process still holding a file there does not keep it mounted.
  ~Tmpfs() { ::umount2(dir_.c_str(), MNT_DETACH); }
  const std::string& dir() const { return dir_; }

 private:
  explicit Tmpfs(std::string dir) : dir_(std::move(dir)) {}
  const std::string dir_;
};

}  // namespace testing
}  // namespace psrt

#endif  // PSRT_TESTS_HARNESS_TMPFS_H_
