#include "common/io/crc32c.h"

#include <cstring>

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif

namespace psrt {
namespace crc32c {
namespace {

#if !defined(__SSE4_2__)
// Reflected polynomial 0x82F63B78, one byte at a time.
struct Table {
  uint32_t t[256];
  Table() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
      t[i] = c;
    }
  }
};
#endif

}  // namespace

uint32_t Extend(uint32_t crc, const void* data, size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
#if defined(__SSE4_2__)
  // The crc32 instruction computes CRC32C; -mavx2 builds have SSE4.2.
  uint64_t c64 = c;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c64 = _mm_crc32_u64(c64, v);
    p += 8;
    n -= 8;
  }
  c = static_cast<uint32_t>(c64);
  while (n-- > 0) c = _mm_crc32_u8(c, *p++);
#else
  static const Table table;
  while (n-- > 0) c = table.t[(c ^ *p++) & 0xff] ^ (c >> 8);
#endif
  return ~c;
}

}  // namespace crc32c
}  // namespace psrt
