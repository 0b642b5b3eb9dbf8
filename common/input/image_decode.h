// PNG and JPEG images as TFRecord features hold them (decode:
// ENCODED_IMAGE), decoded with Debian's libpng and libjpeg-turbo to
// [H, W, C] unsigned bytes, rows top to bottom, channels interleaved.
//
// A corrupt image is an error, never an abort: libpng's and libjpeg's error
// handlers return here by longjmp to a frame with no C++ object to unwind.
// Nothing is allocated for the pixels before the header's width, height and
// channels are checked against the shape the caller expects.
//
// Thread-safe: no state is shared between calls.
#ifndef PSRT_COMMON_INPUT_IMAGE_DECODE_H_
#define PSRT_COMMON_INPUT_IMAGE_DECODE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace psrt {

enum class ImageKind { kNone, kPng, kJpeg };

// What `bytes` starts like: a PNG signature, a JPEG SOI marker, or neither.
ImageKind SniffImage(absl::string_view bytes);
const char* ImageKindName(ImageKind kind);  // "PNG", "JPEG", "unknown"

// Decodes the PNG or JPEG in `bytes` into `out` (height*width*channels
// bytes). PNG: a palette becomes RGB (RGBA with transparency), gray under 8
// bits is widened, 16 bits keep their high byte. JPEG: gray stays one
// channel, YCbCr becomes RGB, with libjpeg's accurate integer DCT (as
// tf.io.decode_jpeg's dct_method "INTEGER_ACCURATE"); corrupt scan data,
// which libjpeg only warns about, is refused. Errors
// (INVALID_ARGUMENT) say what the image is and what was expected: neither a
// PNG nor a JPEG, dimensions other than height x width x channels, or what
// libpng / libjpeg found corrupt. The caller names the feature and record.
absl::Status DecodeImage(absl::string_view bytes, int64_t height, int64_t width, int64_t channels,
                         std::vector<uint8_t>* out);

}  // namespace psrt

#endif  // PSRT_COMMON_INPUT_IMAGE_DECODE_H_
