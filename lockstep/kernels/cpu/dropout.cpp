// Dropout's Philox draws on the CPU (AVX-512 or AVX2 where the CPU has them; attention uses them
// too) and the cpu backend's dropout loops, f32/f64 and bf16/f16 (see kernels/dispatch.h).
#include "lockstep/kernels/dropout.h"

#include <immintrin.h>

#include <algorithm>
#include <type_traits>

#include "lockstep/kernels/dispatch.h"
#include "lockstep/kernels/tables/dropout.h"
#include "lockstep/tensor/convert.h"

namespace lockstep::kernels {

namespace {
double scaleFor(double p) { return p >= 1.0 ? 0.0 : 1.0 / (1.0 - p); }

void dropoutScalesScalar(uint64_t base, int64_t n, uint64_t key, uint64_t threshold, float scale,
                         float* out) {
  for (int64_t c = 0; c < n; ++c)
    out[c] = dropoutKeepsBelow(base + static_cast<uint64_t>(c), key, threshold) ? scale : 0.0f;
}

#if defined(__x86_64__)
struct HiLo {
  __m256i hi, lo;
};
// The 8 lanes' 32 x 32 -> 64-bit products, split into high and low words: vpmuludq takes the even
// lanes, a 64-bit shift brings the odd ones down, two blends put the words back in lane order.
__attribute__((target("avx2"))) inline HiLo mulHiLo(__m256i a, __m256i m) {
  const __m256i even = _mm256_mul_epu32(a, m), odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
  return {_mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA),
          _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA)};
}

// Per iteration, philox4x32 for 8 consecutive calls (one per lane), their 4 words transposed into
// counter order (call 0's words 0-3, call 1's, ...) and compared: 32 counters' decisions.
__attribute__((target("avx2"))) void dropoutScalesAvx2(uint64_t base, int64_t n, uint64_t key,
                                                       uint64_t threshold, float scale, float* out) {
  const __m256i m0 = _mm256_set1_epi32(static_cast<int>(kPhiloxM0));
  const __m256i m1 = _mm256_set1_epi32(static_cast<int>(kPhiloxM1));
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i sign = _mm256_set1_epi32(static_cast<int>(0x80000000u));  // unsigned order via signed
  const __m256i hi_lo = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(kDropoutStream)));
  const __m256i hi_hi = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(kDropoutStream >> 32)));
  // threshold <= 2^32: a word is kept when below it; 2^32 keeps every word.
  const __m256i thv = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(threshold) ^ 0x80000000u));
  const __m256i all = _mm256_set1_epi32(threshold > 0xFFFFFFFFull ? -1 : 0);
  const __m256 sv = _mm256_set1_ps(scale);
  __m256i k0[10], k1[10];
  for (uint32_t r = 0; r < 10; ++r) {
    k0[r] = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(key) + r * kPhiloxW0));
    k1[r] = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(key >> 32) + r * kPhiloxW1));
  }
  alignas(32) float part[32];
  // e: the element the iteration's first word belongs to (negative while base is not a multiple of 4).
  int64_t e = -static_cast<int64_t>(base & 3);
  for (uint64_t call = base >> 2; e < n; call += 8, e += 32) {
    const __m256i lo = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(call)));
    __m256i c0 = _mm256_add_epi32(lo, lane);
    // A lane whose low word wrapped past 2^32 carries one into its high word.
    const __m256i wrapped = _mm256_cmpgt_epi32(_mm256_xor_si256(lo, sign), _mm256_xor_si256(c0, sign));
    __m256i c1 =
        _mm256_sub_epi32(_mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(call >> 32))), wrapped);
    __m256i c2 = hi_lo, c3 = hi_hi;
#pragma GCC unroll 10
    for (int r = 0; r < 10; ++r) {
      const HiLo p0 = mulHiLo(c0, m0), p1 = mulHiLo(c2, m1);
      c0 = _mm256_xor_si256(_mm256_xor_si256(p1.hi, c1), k0[r]);
      c1 = p1.lo;
      c2 = _mm256_xor_si256(_mm256_xor_si256(p0.hi, c3), k1[r]);
      c3 = p0.lo;
    }
    // 4 x 8 words -> counter order: u0 = calls 0 | 4, u1 = 1 | 5, u2 = 2 | 6, u3 = 3 | 7.
    const __m256i t0 = _mm256_unpacklo_epi32(c0, c1), t1 = _mm256_unpackhi_epi32(c0, c1);
    const __m256i t2 = _mm256_unpacklo_epi32(c2, c3), t3 = _mm256_unpackhi_epi32(c2, c3);
    const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
    const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
    const __m256i words[4] = {
        _mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u2, u3, 0x20),
        _mm256_permute2x128_si256(u0, u1, 0x31), _mm256_permute2x128_si256(u2, u3, 0x31)};
    const bool whole = e >= 0 && e + 32 <= n;
    float* dst = whole ? out + e : part;
    for (int q = 0; q < 4; ++q) {
      const __m256i kept = _mm256_or_si256(_mm256_cmpgt_epi32(thv, _mm256_xor_si256(words[q], sign)), all);
      _mm256_storeu_ps(dst + 8 * q, _mm256_and_ps(_mm256_castsi256_ps(kept), sv));
    }
    if (!whole) {
      const int64_t from = std::max<int64_t>(e, 0), to = std::min<int64_t>(e + 32, n);
      std::copy(part + (from - e), part + (to - e), out + from);
    }
  }
}

// The same with AVX-512: 16 Philox calls per iteration (64 counters), unsigned compares into masks.
// GCC 12 warns that the intrinsics' own _mm512_undefined_epi32() "may be used uninitialized" (GCC
// bug 105593, fixed in GCC 13): a false positive from its headers, silenced for these two functions.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"))) inline void mulHiLo512(__m512i a, __m512i m, __m512i& hi, __m512i& lo) {
  const __m512i even = _mm512_mul_epu32(a, m), odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
  hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
  lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
}

__attribute__((target("avx512f"))) void dropoutScalesAvx512(uint64_t base, int64_t n, uint64_t key,
                                                            uint64_t threshold, float scale, float* out) {
  const __m512i m0 = _mm512_set1_epi32(static_cast<int>(kPhiloxM0));
  const __m512i m1 = _mm512_set1_epi32(static_cast<int>(kPhiloxM1));
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i hi_lo = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(kDropoutStream)));
  const __m512i hi_hi = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(kDropoutStream >> 32)));
  const __m512i thv = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(threshold)));
  const __mmask16 all = threshold > 0xFFFFFFFFull ? 0xFFFF : 0;  // 2^32 keeps every word
  const __m512 sv = _mm512_set1_ps(scale);
  __m512i k0[10], k1[10];
  for (uint32_t r = 0; r < 10; ++r) {
    k0[r] = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(key) + r * kPhiloxW0));
    k1[r] = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(key >> 32) + r * kPhiloxW1));
  }
  alignas(64) float part[64];
  int64_t e = -static_cast<int64_t>(base & 3);
  for (uint64_t call = base >> 2; e < n; call += 16, e += 64) {
    const __m512i lo = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(call)));
    __m512i c0 = _mm512_add_epi32(lo, lane);
    const __mmask16 wrapped = _mm512_cmplt_epu32_mask(c0, lo);
    const __m512i hi = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(call >> 32)));
    __m512i c1 = _mm512_mask_add_epi32(hi, wrapped, hi, one);
    __m512i c2 = hi_lo, c3 = hi_hi;
#pragma GCC unroll 10
    for (int r = 0; r < 10; ++r) {
      __m512i h0, l0, h1, l1;
      mulHiLo512(c0, m0, h0, l0);
      mulHiLo512(c2, m1, h1, l1);
      c0 = _mm512_xor_si512(_mm512_xor_si512(h1, c1), k0[r]);
      c1 = l1;
      c2 = _mm512_xor_si512(_mm512_xor_si512(h0, c3), k1[r]);
      c3 = l0;
    }
    // 4 x 16 words -> counter order. Within each 128-bit lane L: u0 = call 4L's words, u1 = 4L+1's,
    // u2 = 4L+2's, u3 = 4L+3's; then vector q = lane q of u0, u1, u2, u3 (calls 4q..4q+3).
    const __m512i t0 = _mm512_unpacklo_epi32(c0, c1), t1 = _mm512_unpackhi_epi32(c0, c1);
    const __m512i t2 = _mm512_unpacklo_epi32(c2, c3), t3 = _mm512_unpackhi_epi32(c2, c3);
    const __m512i u0 = _mm512_unpacklo_epi64(t0, t2), u1 = _mm512_unpackhi_epi64(t0, t2);
    const __m512i u2 = _mm512_unpacklo_epi64(t1, t3), u3 = _mm512_unpackhi_epi64(t1, t3);
    const __m512i a_lo = _mm512_shuffle_i32x4(u0, u1, _MM_SHUFFLE(1, 0, 1, 0));
    const __m512i a_hi = _mm512_shuffle_i32x4(u0, u1, _MM_SHUFFLE(3, 2, 3, 2));
    const __m512i b_lo = _mm512_shuffle_i32x4(u2, u3, _MM_SHUFFLE(1, 0, 1, 0));
    const __m512i b_hi = _mm512_shuffle_i32x4(u2, u3, _MM_SHUFFLE(3, 2, 3, 2));
    const __m512i words[4] = {_mm512_shuffle_i32x4(a_lo, b_lo, _MM_SHUFFLE(2, 0, 2, 0)),
                              _mm512_shuffle_i32x4(a_lo, b_lo, _MM_SHUFFLE(3, 1, 3, 1)),
                              _mm512_shuffle_i32x4(a_hi, b_hi, _MM_SHUFFLE(2, 0, 2, 0)),
                              _mm512_shuffle_i32x4(a_hi, b_hi, _MM_SHUFFLE(3, 1, 3, 1))};
    const bool whole = e >= 0 && e + 64 <= n;
    float* dst = whole ? out + e : part;
    for (int q = 0; q < 4; ++q) {
      const __mmask16 kept = static_cast<__mmask16>(_mm512_cmplt_epu32_mask(words[q], thv) | all);
      _mm512_storeu_ps(dst + 16 * q, _mm512_maskz_mov_ps(kept, sv));
    }
    if (!whole) {
      const int64_t from = std::max<int64_t>(e, 0), to = std::min<int64_t>(e + 64, n);
      std::copy(part + (from - e), part + (to - e), out + from);
    }
  }
}
#pragma GCC diagnostic pop
#endif

template <typename T>
void dropoutLoop(const T* x, T* y, uint8_t* m, int64_t n, double p, uint64_t base, uint64_t key) {
  const T scale = static_cast<T>(scaleFor(p));
  const double keep = 1.0 - p;
  // Each element's draw depends only on its index: any split of the loop gives the same mask.
  if constexpr (std::is_same_v<T, float>) {
    constexpr int64_t kChunk = 2048;
    const uint64_t threshold = dropoutThreshold(keep);
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
      float kept[kChunk];
      const int64_t len = std::min(kChunk, n - i0);
      dropoutScales(base + static_cast<uint64_t>(i0), len, key, threshold, 1.0f, kept);
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) {
        m[i0 + i] = kept[i] != 0.0f ? 1 : 0;
        y[i0 + i] = kept[i] != 0.0f ? x[i0 + i] * scale : 0.0f;
      }
    }
  } else {
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t k = dropoutKeeps(base + static_cast<uint64_t>(i), key, keep) ? 1 : 0;
      m[i] = k;
      y[i] = k ? x[i] * scale : T(0);
    }
  }
}

template <typename T>
void backwardLoop(const T* g, const uint8_t* m, T* gx, int64_t n, double p) {
  const T scale = static_cast<T>(scaleFor(p));
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) gx[i] = m[i] ? g[i] * scale : T(0);
}

// bf16 / f16 storage: blocks widened to f32, the f32 loops' arithmetic, rounded back once. Bit for
// bit what emulating them gives (whole f32 copies, the f32 loop, rounding), without the copies.
constexpr int64_t kChunk16 = 2048;

void dropoutLoop16(const uint16_t* x, uint16_t* y, uint8_t* m, int64_t n, double p, uint64_t base,
                   uint64_t key, Convert16 c) {
  const auto scale = static_cast<float>(scaleFor(p));
  const uint64_t threshold = dropoutThreshold(1.0 - p);
#pragma omp parallel for schedule(static) if (n > 32768)
  for (int64_t i0 = 0; i0 < n; i0 += kChunk16) {
    float kept[kChunk16], v[kChunk16];
    const int64_t len = std::min(kChunk16, n - i0);
    dropoutScales(base + static_cast<uint64_t>(i0), len, key, threshold, 1.0f, kept);
    c.widen(x + i0, v, len);
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) {
      m[i0 + i] = kept[i] != 0.0f ? 1 : 0;
      v[i] = kept[i] != 0.0f ? v[i] * scale : 0.0f;
    }
    c.narrow(v, y + i0, len);
  }
}

void backwardLoop16(const uint16_t* g, const uint8_t* m, uint16_t* gx, int64_t n, double p, Convert16 c) {
  const auto scale = static_cast<float>(scaleFor(p));
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i0 = 0; i0 < n; i0 += kChunk16) {
    float v[kChunk16];
    const int64_t len = std::min(kChunk16, n - i0);
    c.widen(g + i0, v, len);
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) v[i] = m[i0 + i] ? v[i] * scale : 0.0f;
    c.narrow(v, gx + i0, len);
  }
}

}  // namespace

bool dropoutScalesWith(PhiloxIsa isa, uint64_t base, int64_t n, uint64_t key, uint64_t threshold, float scale,
                       float* out) {
  switch (isa) {
    case PhiloxIsa::scalar:
      dropoutScalesScalar(base, n, key, threshold, scale, out);
      return true;
#if defined(__x86_64__)
    case PhiloxIsa::avx2:
      if (!__builtin_cpu_supports("avx2")) return false;
      dropoutScalesAvx2(base, n, key, threshold, scale, out);
      return true;
    case PhiloxIsa::avx512:
      if (!__builtin_cpu_supports("avx512f")) return false;
      dropoutScalesAvx512(base, n, key, threshold, scale, out);
      return true;
#endif
    default:
      return false;
  }
}

void dropoutScales(uint64_t base, int64_t n, uint64_t key, uint64_t threshold, float scale, float* out) {
#if defined(__x86_64__)
  static const bool avx512 = __builtin_cpu_supports("avx512f"), avx2 = __builtin_cpu_supports("avx2");
  if (avx512) return dropoutScalesAvx512(base, n, key, threshold, scale, out);
  if (avx2) return dropoutScalesAvx2(base, n, key, threshold, scale, out);
#endif
  dropoutScalesScalar(base, n, key, threshold, scale, out);
}

namespace cpu {

namespace {

std::pair<Tensor, Tensor> dropoutForward(const Tensor& x0, double p, Generator& gen) {
  // Row-major order defines which counter an element draws, so work on a contiguous tensor.
  Tensor x = x0.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype()), mask = Tensor::empty(x.shape(), DType::u8);
  const uint64_t base = gen.offset(), key = gen.seed();
  if (isLowPrecision(x.dtype())) {
    dropoutLoop16(static_cast<const uint16_t*>(x.dataPtr()), static_cast<uint16_t*>(y.dataPtr()),
                  mask.data<uint8_t>(), x.numel(), p, base, key, convert16(x.dtype() == DType::bf16));
  } else {
    visitDType(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        dropoutLoop<T>(x.data<T>(), y.data<T>(), mask.data<uint8_t>(), x.numel(), p, base, key);
      } else {
        throw ValueError(std::string("dropout: needs a floating tensor, got ") + dtypeName(x.dtype()));
      }
    });
  }
  gen.setState(key, base + static_cast<uint64_t>(x.numel()));
  return {y, mask};
}

Tensor dropoutBackward(const Tensor& gy0, const Tensor& mask0, double p) {
  Tensor gy = gy0.contiguous(), mask = mask0.contiguous();
  Tensor gx = Tensor::empty(gy.shape(), gy.dtype());
  if (isLowPrecision(gy.dtype())) {
    backwardLoop16(static_cast<const uint16_t*>(gy.dataPtr()), mask.data<uint8_t>(),
                   static_cast<uint16_t*>(gx.dataPtr()), gy.numel(), p, convert16(gy.dtype() == DType::bf16));
    return gx;
  }
  visitDType(gy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      backwardLoop<T>(gy.data<T>(), mask.data<uint8_t>(), gx.data<T>(), gy.numel(), p);
    } else {
      throw ValueError(std::string("dropout backward: needs a floating gradient, got ") +
                       dtypeName(gy.dtype()));
    }
  });
  return gx;
}

}  // namespace

const DropoutKernels kDropout{LOCKSTEP_DROPOUT_OPS(LOCKSTEP_KERNEL_ENTRY)};

}  // namespace cpu

}  // namespace lockstep::kernels
