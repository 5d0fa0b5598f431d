#include "lockstep/tensor/generator.h"

#include <cmath>

namespace lockstep {

std::array<uint32_t, 4> philox4x32(uint64_t counter_lo, uint64_t counter_hi, uint64_t key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(counter_lo), c1 = static_cast<uint32_t>(counter_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(counter_hi), c3 = static_cast<uint32_t>(counter_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += kW0;
    k1 += kW1;
  }
  return {c0, c1, c2, c3};
}

namespace {
inline double u01(uint32_t a, uint32_t b) {
  uint64_t x = (static_cast<uint64_t>(a) << 21) ^ (b >> 11);  // 53 bits
  return static_cast<double>(x & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

template <typename Fn>
void fillByIndex(Tensor& t, Fn&& value_at) {
  LOCKSTEP_ENFORCE(isFloating(t.dtype()) || t.dtype() == DType::u8, ValueError,
                   "random fill needs a floating tensor, got ", dtypeName(t.dtype()));
  Tensor work = Tensor::empty(t.shape(), DType::f64);
  double* p = work.data<double>();
  const int64_t n = t.numel();
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) p[i] = value_at(static_cast<uint64_t>(i));
  t.copyFrom(work);
}
}  // namespace

uint64_t Generator::nextU64() {
  auto r = philox4x32(offset_++, 0, seed_);
  return (static_cast<uint64_t>(r[0]) << 32) | r[1];
}

double Generator::nextDouble() {
  auto r = philox4x32(offset_++, 0, seed_);
  return u01(r[0], r[1]);
}

uint64_t Generator::nextBelow(uint64_t n) {
  LOCKSTEP_CHECK(n > 0);
  // Rejection sampling: unbiased.
  uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do {
    x = nextU64();
  } while (x >= limit);
  return x % n;
}

void Generator::uniform(Tensor& t, double low, double high) {
  const uint64_t base = offset_, key = seed_;
  fillByIndex(t, [&](uint64_t i) {
    auto r = philox4x32(base + i, 0, key);
    return low + (high - low) * u01(r[0], r[1]);
  });
  offset_ += static_cast<uint64_t>(t.numel());
}

void Generator::normal(Tensor& t, double mean, double std) {
  const uint64_t base = offset_, key = seed_;
  fillByIndex(t, [&](uint64_t i) {
    auto r = philox4x32(base + i, 0, key);
    double u1 = 1.0 - u01(r[0], r[1]);  // (0, 1]
    double u2 = u01(r[2], r[3]);
    return mean + std * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  });
  offset_ += static_cast<uint64_t>(t.numel());
}

void Generator::bernoulli(Tensor& t, double p) {
  const uint64_t base = offset_, key = seed_;
  fillByIndex(t, [&](uint64_t i) {
    auto r = philox4x32(base + i, 0, key);
    return u01(r[0], r[1]) < p ? 1.0 : 0.0;
  });
  offset_ += static_cast<uint64_t>(t.numel());
}

Generator& defaultGenerator() {
  static Generator g(0);
  return g;
}

void manualSeed(uint64_t seed) { defaultGenerator().setState(seed, 0); }

}  // namespace lockstep
