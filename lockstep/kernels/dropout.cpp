#include "lockstep/kernels/dropout.h"

#include <type_traits>

#include "lockstep/kernels/cuda/dropout.h"
#include "lockstep/kernels/dispatch.h"

namespace lockstep::kernels {

namespace {
double scaleFor(double p) { return p >= 1.0 ? 0.0 : 1.0 / (1.0 - p); }

template <typename T>
void dropoutLoop(const T* x, T* y, uint8_t* m, int64_t n, double p, uint64_t base, uint64_t key) {
  const T scale = static_cast<T>(scaleFor(p));
  const double keep = 1.0 - p;
  // Each element's draw depends only on its index: any split of the loop gives the same mask.
#pragma omp parallel for schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t k = dropoutKeeps(base + static_cast<uint64_t>(i), key, keep) ? 1 : 0;
    m[i] = k;
    y[i] = k ? x[i] * scale : T(0);
  }
}

template <typename T>
void backwardLoop(const T* g, const uint8_t* m, T* gx, int64_t n, double p) {
  const T scale = static_cast<T>(scaleFor(p));
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) gx[i] = m[i] ? g[i] * scale : T(0);
}

void checkP(double p) {
  LOCKSTEP_ENFORCE(p >= 0.0 && p <= 1.0, ValueError, "dropout: probability must be in [0, 1], got ", p);
}

#if LOCKSTEP_WITH_CUDA
// The device draws the same counters as the host loop, and the generator advances the same way.
std::pair<Tensor, Tensor> dropoutOnGpu(const Tensor& x, double p, Generator& gen) {
  const uint64_t base = gen.offset(), key = gen.seed();
  auto r = cuda::dropoutForward(x, p, key, base);
  gen.setState(key, base + static_cast<uint64_t>(x.numel()));
  return r;
}
#endif
}  // namespace

std::pair<Tensor, Tensor> dropoutForward(const Tensor& x0, double p, Generator& gen) {
  checkP(p);
  LOCKSTEP_ON_CUDA(x0, dropoutOnGpu(x0, p, gen));
  if (isLowPrecision(x0.dtype())) {  // the same draws as f32; the kept values scale exactly as f32 does
    auto [y, mask] = dropoutForward(x0.to(DType::f32), p, gen);
    return {y.to(x0.dtype()), mask};
  }
  LOCKSTEP_ENFORCE(x0.dtype() == DType::f32 || x0.dtype() == DType::f64, ValueError,
                   "dropout: needs a floating tensor, got ", x0.describe());
  if (backendFor(x0.dtype()) == Backend::reference) return reference::dropoutForward(x0, p, gen);
  // Row-major order defines which counter an element draws, so work on a contiguous tensor.
  Tensor x = x0.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype()), mask = Tensor::empty(x.shape(), DType::u8);
  const uint64_t base = gen.offset(), key = gen.seed();
  visitDType(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      dropoutLoop<T>(x.data<T>(), y.data<T>(), mask.data<uint8_t>(), x.numel(), p, base, key);
    }
  });
  gen.setState(key, base + static_cast<uint64_t>(x.numel()));
  return {y, mask};
}

Tensor dropoutBackward(const Tensor& gy0, const Tensor& mask0, double p) {
  checkP(p);
  LOCKSTEP_ENFORCE(gy0.shape() == mask0.shape() && mask0.dtype() == DType::u8, ValueError,
                   "dropout backward: gradient ", gy0.describe(), " does not match mask ", mask0.describe());
  LOCKSTEP_ON_CUDA(gy0.isCuda() ? gy0 : mask0, cuda::dropoutBackward(gy0, mask0, p));
  if (isLowPrecision(gy0.dtype())) return dropoutBackward(gy0.to(DType::f32), mask0, p).to(gy0.dtype());
  if (backendFor(gy0.dtype()) == Backend::reference) return reference::dropoutBackward(gy0, mask0, p);
  Tensor gy = gy0.contiguous(), mask = mask0.contiguous();
  Tensor gx = Tensor::empty(gy.shape(), gy.dtype());
  visitDType(gy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      backwardLoop<T>(gy.data<T>(), mask.data<uint8_t>(), gx.data<T>(), gy.numel(), p);
    } else {
      throw ValueError(std::string("dropout backward: needs an f32 or f64 gradient, got ") +
                       dtypeName(gy.dtype()));
    }
  });
  return gx;
}

}  // namespace lockstep::kernels
