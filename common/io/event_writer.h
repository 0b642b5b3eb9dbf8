// Writes TensorBoard event files: TFRecord framing of tf.Event protos, the
// first one naming the file version, then one per scalar.
//
//   ASSIGN_OR_RETURN(auto events, EventWriter::Create(job.log_dir()));
//   RETURN_IF_ERROR(events->AddScalar("loss", step, loss));
//   RETURN_IF_ERROR(events->Flush());
//
// Thread-safe.
#ifndef PSRT_COMMON_IO_EVENT_WRITER_H_
#define PSRT_COMMON_IO_EVENT_WRITER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/io/record_io.h"

namespace psrt {

class EventWriter {
 public:
  // Creates `dir` if needed and a new events.out.tfevents.<time>.<host>.<pid> file in it.
  static absl::StatusOr<std::unique_ptr<EventWriter>> Create(const std::string& dir);

  absl::Status AddScalar(const std::string& tag, int64_t step, float value);
  absl::Status Flush();
  const std::string& path() const { return path_; }

 private:
  EventWriter(std::string path, std::unique_ptr<RecordWriter> writer)
      : path_(std::move(path)), writer_(std::move(writer)) {}

  const std::string path_;
  absl::Mutex mu_;
  std::unique_ptr<RecordWriter> writer_ ABSL_GUARDED_BY(mu_);
};

}  // namespace psrt

#endif  // PSRT_COMMON_IO_EVENT_WRITER_H_
