#include "lockstep/tensor/convert.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstring>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "lockstep/util/dtype.h"

namespace lockstep {

namespace {

// A conversion of many elements (ZeRO-Offload's f32 master weights rounded for the GPU, a model's
// worth) splits into runs across the OpenMP threads: each element's result is its own, so the
// split changes nothing but the time. Not inside a parallel region (the kernels' blocks).
constexpr int64_t kThreadedRun = int64_t{1} << 18;

template <typename Run>
void convertRuns(int64_t n, Run&& run) {
#ifdef _OPENMP
  if (n >= 2 * kThreadedRun && !omp_in_parallel() && omp_get_max_threads() > 1) {
    const int64_t runs = (n + kThreadedRun - 1) / kThreadedRun;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < runs; ++r) run(r * kThreadedRun, std::min(n, (r + 1) * kThreadedRun));
    return;
  }
#endif
  run(int64_t{0}, n);
}

// BFloat16(float) without its branch, so that the loop vectorises; cloned for AVX-512 and AVX2.
__attribute__((target_clones("avx512f", "avx2", "default"))) void f32ToBF16Run(const float* __restrict src,
                                                                               uint16_t* __restrict dst,
                                                                               int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &src[i], 4);
    const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    dst[i] = static_cast<uint16_t>(nan ? ((u >> 16) | 0x40u) : rounded);
  }
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void bf16ToF32Run(const uint16_t* __restrict src,
                                                                               float* __restrict dst,
                                                                               int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = static_cast<uint32_t>(src[i]) << 16;
    std::memcpy(&dst[i], &u, 4);
  }
}

}  // namespace

void convertF32ToBF16(const float* src, uint16_t* dst, int64_t n) {
  convertRuns(n, [&](int64_t b, int64_t e) { f32ToBF16Run(src + b, dst + b, e - b); });
}

void convertBF16ToF32(const uint16_t* src, float* dst, int64_t n) {
  convertRuns(n, [&](int64_t b, int64_t e) { bf16ToF32Run(src + b, dst + b, e - b); });
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

namespace {
// An f16 conversion in runs: F16C's 8 at a time where the CPU has it, the scalar one for the rest.
template <typename S, typename D>
void convertF16Runs(const S* src, D* dst, int64_t n, int64_t (*simd)(const S*, D*, int64_t), D (*one)(S)) {
  convertRuns(n, [&](int64_t b, int64_t e) {
    int64_t i = 0;
#if defined(__x86_64__)
    if (hasF16c()) i = simd(src + b, dst + b, e - b);
#else
    (void)simd;
#endif
    for (i += b; i < e; ++i) dst[i] = one(src[i]);
  });
}

uint16_t halfBits(float f) { return Half(f).bits; }
float halfValue(uint16_t bits) {
  Half h;
  h.bits = bits;
  return static_cast<float>(h);
}
}  // namespace

void convertF32ToF16(const float* src, uint16_t* dst, int64_t n) {
#if defined(__x86_64__)
  convertF16Runs(src, dst, n, f32ToF16Simd, halfBits);
#else
  convertF16Runs<float, uint16_t>(src, dst, n, nullptr, halfBits);
#endif
}

void convertF16ToF32(const uint16_t* src, float* dst, int64_t n) {
#if defined(__x86_64__)
  convertF16Runs(src, dst, n, f16ToF32Simd, halfValue);
#else
  convertF16Runs<uint16_t, float>(src, dst, n, nullptr, halfValue);
#endif
}

}  // namespace lockstep
