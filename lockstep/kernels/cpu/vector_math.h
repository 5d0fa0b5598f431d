#pragma once
// Element math for the cpu backend's f32 loops (attention, cross entropy), written so that the loops
// calling it vectorise: the library expf does not without -ffast-math, and GCC 12's -O2 cost model
// ("very cheap") leaves loops with a remainder scalar. Files using these are compiled with
// -fvect-cost-model=dynamic (CMakeLists.txt) and mark their row loops LOCKSTEP_VECTOR_CLONES.
#include <bit>
#include <cstdint>

/// AVX-512 and AVX2 clones of the function next to the baseline one, picked at load time (GCC
/// target_clones), so that row loops run 16 or 8 floats wide where the CPU can. On a Zen 5 (a full
/// 512-bit datapath) the AVX-512 clones made gpt-mini's pipeline stages 5-14% faster (GELU,
/// attention's softmax rows; bench/pipeline.bench.sh, docs/pipeline.md).
#define LOCKSTEP_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
/// The same for function templates (the optimizer's and the norms' loops): GCC clones them; clang 14
/// (the fuzz build) does not multiversion templates, so there they are the baseline alone.
#if defined(__clang__)
#define LOCKSTEP_VECTOR_CLONES_TEMPLATE
#else
#define LOCKSTEP_VECTOR_CLONES_TEMPLATE LOCKSTEP_VECTOR_CLONES
#endif

namespace lockstep::kernels {

/// exp(x) for x <= 0 (softmax arguments, x - max), to ~2 ulp: 2^n * poly(r), r = x - n ln 2.
/// Branch-free on purpose. Below 2^-126 it gives ~1e-38 instead of 0 (no denormals), -inf included.
inline float expNonPositive(float x0) {
  // -inf (a masked logit or score) as -104, where exp is already below float's smallest normal:
  // -inf itself would make r = -inf + inf, NaN. A NaN is kept (its magnitude's bits are above
  // infinity's) and stays NaN through the arithmetic. Integer compares on the bits: a float compare,
  // or a select of the result, keeps GCC from vectorising the loops that call this (it branches
  // instead; GELU ran 3x slower).
  const int32_t magnitude = std::bit_cast<int32_t>(x0) & 0x7fffffff;
  constexpr int32_t kCap = std::bit_cast<int32_t>(104.0f), kInf = 0x7f800000;
  const int32_t capped = magnitude < kCap ? magnitude : kCap;
  const int32_t nan = magnitude > kInf ? 0x7fc00000 : 0;  // OR-ed in: the capped bits stay a NaN
  const float x = -std::bit_cast<float>(capped | nan);    // x0 <= 0: -|x0|
  const float t = x * 1.44269504088896341f;
  const float n = (t + 12582912.0f) - 12582912.0f;  // round to nearest by the 1.5 * 2^23 trick
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // 2^max(n, -126): the max by |.| (exact on integers) keeps the loop free of branches, which GCC
  // would not if-convert.
  const float nc = 0.5f * (n - 126.0f + __builtin_fabsf(n + 126.0f));
  return p * std::bit_cast<float>((static_cast<int32_t>(nc) + 127) << 23);
}

}  // namespace lockstep::kernels
