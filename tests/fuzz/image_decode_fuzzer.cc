// Fuzzes the PNG and JPEG decoders (common/input/image_decode.h): libpng's
// and libjpeg's errors must come back as a status through their setjmp
// handlers, never abort or leak, and an accepted image fills exactly the
// shape asked for.
//
// Input layout: byte 0's low 2 bits pick the expected shape (4x3x1, 4x3x3,
// 4x3x4, 2x2x2); the rest is the image. Seeds: TensorFlow's encode_png and
// encode_jpeg of 4x3 gray and RGB images.
#include <cstdint>
#include <vector>

#include "tests/fuzz/fuzz_util.h"
#include "common/input/image_decode.h"

using psrt::fuzz::Check;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  constexpr int64_t kShapes[4][3] = {{4, 3, 1}, {4, 3, 3}, {4, 3, 4}, {2, 2, 2}};
  const int64_t* shape = kShapes[data[0] & 3];
  std::vector<uint8_t> out;
  absl::Status s = psrt::DecodeImage(absl::string_view(reinterpret_cast<const char*>(data) + 1, size - 1),
                                     shape[0], shape[1], shape[2], &out);
  if (s.ok()) {
    Check(static_cast<int64_t>(out.size()) == shape[0] * shape[1] * shape[2], "an image fills its shape");
  } else {
    Check(out.empty(), "a refused image leaves no pixels");
    Check(s.code() == absl::StatusCode::kInvalidArgument, "a bad image is INVALID_ARGUMENT");
  }
  return 0;
}
