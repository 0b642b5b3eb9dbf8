// Fuzzes the TFRecord reader (common/io/record_io.h) with arbitrary file
// contents, plain and compressed.
//
// - The input as a file, its compression detected: a file read as plain to
//   a clean end without error must be exactly what RecordWriter writes for
//   the same records (TFRecord framing leaves no slack, so anything else
//   means the reader accepted a corrupt frame). Inputs that look like gzip
//   or zlib drive the inflater over corrupt streams.
// - The input gzip- and zlib-compressed: read detected, the reader must give
//   exactly what it gives for the plain input read as NONE (the same
//   records, or an error of the same code).
#include <cstdint>
#include <string>
#include <vector>

#include "common/io/record_io.h"
#include "common/testing/compress.h"
#include "tests/fuzz/fuzz_util.h"

using psrt::fuzz::Check;

namespace {

struct Outcome {
  std::vector<std::string> records;
  absl::StatusCode code = absl::StatusCode::kOk;
  psrt::Compression compression = psrt::Compression::kAuto;
};

Outcome ReadAll(const std::string& path, psrt::Compression compression) {
  Outcome out;
  absl::StatusOr<std::unique_ptr<psrt::RecordReader>> reader = psrt::RecordReader::Open(path, compression);
  Check(reader.ok(), "cannot open an existing file");
  out.compression = (*reader)->compression();
  while (true) {
    std::string record;
    absl::StatusOr<bool> more = (*reader)->Next(&record);
    if (!more.ok()) {
      out.code = more.status().code();
      Check(out.code == absl::StatusCode::kDataLoss || out.code == absl::StatusCode::kInvalidArgument,
            "corrupt record gives an unexpected error code");
      return out;
    }
    if (!*more) return out;
    out.records.push_back(std::move(record));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string in_path = psrt::fuzz::ScratchPath("in.tfrecord");
  static const std::string out_path = psrt::fuzz::ScratchPath("out.tfrecord");
  const std::string input(reinterpret_cast<const char*>(data), size);
  psrt::fuzz::WriteFile(in_path, data, size);

  const Outcome detected = ReadAll(in_path, psrt::Compression::kAuto);
  Check(detected.compression != psrt::Compression::kAuto, "the reader reports no compression");
  const Outcome plain = ReadAll(in_path, psrt::Compression::kNone);
  if (detected.compression == psrt::Compression::kNone) {
    Check(detected.code == plain.code && detected.records == plain.records,
          "a file detected as plain reads differently from one read as NONE");
  }

  for (bool gzip : {true, false}) {
    const std::string compressed = psrt::testing::Compress(input, gzip);
    Check(!compressed.empty(), "zlib cannot compress the input");
    psrt::fuzz::WriteFile(in_path, reinterpret_cast<const uint8_t*>(compressed.data()), compressed.size());
    const Outcome inflated = ReadAll(in_path, psrt::Compression::kAuto);
    Check(inflated.compression == (gzip ? psrt::Compression::kGzip : psrt::Compression::kZlib),
          "a compressed file is not detected as such");
    Check(inflated.code == plain.code && inflated.records == plain.records,
          "a compressed file reads differently from its plain contents");
  }

  if (plain.code != absl::StatusCode::kOk) return 0;
  auto writer = psrt::RecordWriter::Open(out_path);
  Check(writer.ok(), "cannot open scratch output");
  for (const std::string& r : plain.records) Check((*writer)->Write(r).ok(), "write");
  Check((*writer)->Flush().ok(), "flush");
  writer->reset();
  Check(psrt::fuzz::ReadFile(out_path) == input,
        "a file read cleanly is not what the writer makes of its records");
  return 0;
}
