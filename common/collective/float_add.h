// dst[i] += src[i] for i in [0, n): the reduction kernel of the collectives.
// Each element is one IEEE add, so the result does not depend on how the
// loop is vectorised (bit-identical to the scalar loop). AVX2 when the
// build enables it (.bazelrc: -mavx2), scalar otherwise.
#ifndef PSRT_COMMON_COLLECTIVE_FLOAT_ADD_H_
#define PSRT_COMMON_COLLECTIVE_FLOAT_ADD_H_

#include <cstddef>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace psrt {

inline void AddFloats(float* dst, const float* src, size_t n) {
  size_t i = 0;
#if defined(__AVX2__)
  for (; i + 32 <= n; i += 32) {
    __m256 a0 = _mm256_add_ps(_mm256_loadu_ps(dst + i), _mm256_loadu_ps(src + i));
    __m256 a1 = _mm256_add_ps(_mm256_loadu_ps(dst + i + 8), _mm256_loadu_ps(src + i + 8));
    __m256 a2 = _mm256_add_ps(_mm256_loadu_ps(dst + i + 16), _mm256_loadu_ps(src + i + 16));
    __m256 a3 = _mm256_add_ps(_mm256_loadu_ps(dst + i + 24), _mm256_loadu_ps(src + i + 24));
    _mm256_storeu_ps(dst + i, a0);
    _mm256_storeu_ps(dst + i + 8, a1);
    _mm256_storeu_ps(dst + i + 16, a2);
    _mm256_storeu_ps(dst + i + 24, a3);
  }
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i, _mm256_add_ps(_mm256_loadu_ps(dst + i), _mm256_loadu_ps(src + i)));
  }
#endif
  for (; i < n; ++i) dst[i] += src[i];
}

}  // namespace psrt

#endif  // PSRT_COMMON_COLLECTIVE_FLOAT_ADD_H_
