#include "common/io/event_writer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/event.pb.h"

namespace psrt {
namespace {

double WallTime() { return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()); }

absl::Status MakeDirs(const std::string& dir) {
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i == dir.size() || dir[i] == '/') {
      std::string partial = dir.substr(0, i);
      if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
        return absl::UnavailableError(absl::StrCat("cannot create ", partial, ": ", std::strerror(errno)));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<EventWriter>> EventWriter::Create(const std::string& dir) {
  if (absl::Status s = MakeDirs(dir); !s.ok()) return s;
  char host[256] = "localhost";
  ::gethostname(host, sizeof(host) - 1);
  std::string path = absl::StrCat(dir, "/events.out.tfevents.",
                                  absl::ToUnixSeconds(absl::Now()), ".", host, ".", ::getpid());
  auto writer = RecordWriter::Open(path);
  if (!writer.ok()) return writer.status();
  tf::Event first;
  first.set_wall_time(WallTime());
  first.set_file_version("brain.Event:2");
  if (absl::Status s = (*writer)->Write(first.SerializeAsString()); !s.ok()) return s;
  if (absl::Status s = (*writer)->Flush(); !s.ok()) return s;
  return std::unique_ptr<EventWriter>(new EventWriter(path, *std::move(writer)));
}

absl::Status EventWriter::AddScalar(const std::string& tag, int64_t step, float value) {
  tf::Event e;
  e.set_wall_time(WallTime());
  e.set_step(step);
  tf::Summary::Value* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(value);
  absl::MutexLock lock(&mu_);
  return writer_->Write(e.SerializeAsString());
}

absl::Status EventWriter::Flush() {
  absl::MutexLock lock(&mu_);
  return writer_->Flush();
}

}  // namespace psrt
