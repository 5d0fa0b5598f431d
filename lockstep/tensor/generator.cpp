#include "lockstep/tensor/generator.h"

#include <cmath>

namespace lockstep {

namespace {
inline double u01(uint32_t a, uint32_t b) {
  uint64_t x = (static_cast<uint64_t>(a) << 21) ^ (b >> 11);  // 53 bits
  return static_cast<double>(x & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

template <typename Fn>
void fillByIndex(Tensor& t, Fn&& value_at) {
  LOCKSTEP_ENFORCE(isFloating(t.dtype()) || t.dtype() == DType::u8, ValueError,
                   "random fill needs a floating tensor, got ", dtypeName(t.dtype()));
  const int64_t n = t.numel();
  // A contiguous host tensor of f32 or f64 takes its values in place: no scratch copy of it in f64
  // (3x a f32 weight's bytes at once, the peak of building a model's largest layer).
  if (!t.isCuda() && t.isContiguous() && (t.dtype() == DType::f32 || t.dtype() == DType::f64)) {
    if (t.dtype() == DType::f32) {
      float* p = t.data<float>();
#pragma omp parallel for schedule(static) if (n > 65536)
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(value_at(static_cast<uint64_t>(i)));
    } else {
      double* p = t.data<double>();
#pragma omp parallel for schedule(static) if (n > 65536)
      for (int64_t i = 0; i < n; ++i) p[i] = value_at(static_cast<uint64_t>(i));
    }
    return;
  }
  Tensor work = Tensor::empty(t.shape(), DType::f64);
  double* p = work.data<double>();
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) p[i] = value_at(static_cast<uint64_t>(i));
  t.copyFrom(work);
}
}  // namespace

bool Generator::deferFill(const Tensor& t, std::function<void(Generator&, Tensor&)> fill) {
  const uint64_t seed = seed_, offset = offset_;
  const bool deferred = t.deferWrite([seed, offset, fill = std::move(fill)](Tensor& v) {
    Generator replay(seed);
    replay.setState(seed, offset);
    fill(replay, v);
  });
  if (deferred) offset_ += static_cast<uint64_t>(t.numel());
  return deferred;
}

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
  if (deferFill(t, [low, high](Generator& g, Tensor& v) { g.uniform(v, low, high); })) return;
  const uint64_t base = offset_, key = seed_;
  fillByIndex(t, [&](uint64_t i) {
    auto r = philox4x32(base + i, 0, key);
    return low + (high - low) * u01(r[0], r[1]);
  });
  offset_ += static_cast<uint64_t>(t.numel());
}

void Generator::normal(Tensor& t, double mean, double std) {
  if (deferFill(t, [mean, std](Generator& g, Tensor& v) { g.normal(v, mean, std); })) return;
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
  if (deferFill(t, [p](Generator& g, Tensor& v) { g.bernoulli(v, p); })) return;
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
