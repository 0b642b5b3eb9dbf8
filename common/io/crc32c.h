// CRC32C (Castagnoli), as TFRecord and TensorBoard event files use it.
#ifndef PSRT_COMMON_IO_CRC32C_H_
#define PSRT_COMMON_IO_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace psrt {
namespace crc32c {

// Extends `crc` (the CRC of earlier bytes, 0 at start) with n bytes.
uint32_t Extend(uint32_t crc, const void* data, size_t n);
inline uint32_t Value(const void* data, size_t n) { return Extend(0, data, n); }

// TFRecord's masking, so that a CRC of bytes that contain CRCs stays strong.
inline uint32_t Mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline uint32_t Unmask(uint32_t masked) {
  uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

}  // namespace crc32c
}  // namespace psrt

#endif  // PSRT_COMMON_IO_CRC32C_H_
