// Fuzzes the TFRecord reader (common/io/record_io.h) with arbitrary file
// contents. A file it reads to a clean end without error must be exactly
// what RecordWriter writes for the same records: TFRecord framing leaves
// no slack, so anything else means the reader accepted a corrupt frame.
#include <cstdint>
#include <string>
#include <vector>

#include "common/io/record_io.h"
#include "tests/fuzz/fuzz_util.h"

using psrt::fuzz::Check;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string in_path = psrt::fuzz::ScratchPath("in.tfrecord");
  static const std::string out_path = psrt::fuzz::ScratchPath("out.tfrecord");
  psrt::fuzz::WriteFile(in_path, data, size);

  absl::StatusOr<std::unique_ptr<psrt::RecordReader>> reader = psrt::RecordReader::Open(in_path);
  Check(reader.ok(), "cannot open an existing file");
  std::vector<std::string> records;
  bool clean = false;
  while (true) {
    std::string record;
    absl::StatusOr<bool> more = (*reader)->Next(&record);
    if (!more.ok()) {
      Check(more.status().code() == absl::StatusCode::kDataLoss ||
                more.status().code() == absl::StatusCode::kInvalidArgument,
            "corrupt record gives an unexpected error code");
      break;
    }
    if (!*more) {
      clean = true;
      break;
    }
    records.push_back(std::move(record));
  }
  if (!clean) return 0;

  auto writer = psrt::RecordWriter::Open(out_path);
  Check(writer.ok(), "cannot open scratch output");
  for (const std::string& r : records) Check((*writer)->Write(r).ok(), "write");
  Check((*writer)->Flush().ok(), "flush");
  writer->reset();
  Check(psrt::fuzz::ReadFile(out_path) == std::string(reinterpret_cast<const char*>(data), size),
        "a file read cleanly is not what the writer makes of its records");
  return 0;
}
