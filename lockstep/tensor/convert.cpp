#include "lockstep/tensor/convert.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include <cstring>

#include "lockstep/util/dtype.h"

namespace lockstep {

void convertF32ToBF16(const float* src, uint16_t* dst, int64_t n) {
  // BFloat16(float) without its branch, so that the loop vectorises.
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &src[i], 4);
    const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    dst[i] = static_cast<uint16_t>(nan ? ((u >> 16) | 0x40u) : rounded);
  }
}

void convertBF16ToF32(const uint16_t* src, float* dst, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = static_cast<uint32_t>(src[i]) << 16;
    std::memcpy(&dst[i], &u, 4);
  }
}

namespace {
#if defined(__x86_64__)
// F16C from CPUID leaf 1 (clang 14's __builtin_cpu_supports does not know "f16c"); AVX through the
// builtin, which also checks that the OS saves the YMM registers.
bool hasF16c() {
  static const bool yes = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0 && __builtin_cpu_supports("avx");
  }();
  return yes;
}

__attribute__((target("avx,f16c"))) int64_t f32ToF16Simd(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  return i;
}

__attribute__((target("avx,f16c"))) int64_t f16ToF32Simd(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  return i;
}
#endif
}  // namespace

void convertF32ToF16(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
#if defined(__x86_64__)
  if (hasF16c()) i = f32ToF16Simd(src, dst, n);
#endif
  for (; i < n; ++i) dst[i] = Half(src[i]).bits;
}

void convertF16ToF32(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(__x86_64__)
  if (hasF16c()) i = f16ToF32Simd(src, dst, n);
#endif
  for (; i < n; ++i) {
    Half h;
    h.bits = src[i];
    dst[i] = static_cast<float>(h);
  }
}

}  // namespace lockstep
