// Compresses bytes as TensorFlow's TFRecordOptions(compression_type=...)
// would (zlib's deflate with a gzip or a zlib wrapper), for tests and
// fuzzers that need compressed input made from arbitrary bytes.
#ifndef PSRT_COMMON_TESTING_COMPRESS_H_
#define PSRT_COMMON_TESTING_COMPRESS_H_

#include <zlib.h>

#include <string>

#include "absl/strings/string_view.h"

namespace psrt {
namespace testing {

// One whole gzip member (gzip = true) or zlib stream of `data`; empty if
// zlib fails (it only does when out of memory).
inline std::string Compress(absl::string_view data, bool gzip) {
  z_stream zs{};
  if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, gzip ? 16 + MAX_WBITS : MAX_WBITS, 8,
                   Z_DEFAULT_STRATEGY) != Z_OK) {
    return "";
  }
  std::string out(deflateBound(&zs, data.size()), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return rc == Z_STREAM_END ? out : "";
}

}  // namespace testing
}  // namespace psrt

#endif  // PSRT_COMMON_TESTING_COMPRESS_H_
