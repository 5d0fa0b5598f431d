// The ground truth for dropout: the mask from the per-counter rule (dropoutKeeps), then plain loops.
#include "lockstep/kernels/dropout.h"

#include "lockstep/kernels/tables/dropout.h"

namespace lockstep::kernels::reference {

std::pair<Tensor, Tensor> dropoutForward(const Tensor& x, double p, Generator& gen) {
  Tensor mask = Tensor::empty(x.shape(), DType::u8);
  const uint64_t base = gen.offset(), key = gen.seed();
  for (int64_t i = 0; i < x.numel(); ++i)
    mask.data<uint8_t>()[i] = dropoutKeeps(base + static_cast<uint64_t>(i), key, 1.0 - p) ? 1 : 0;
  gen.setState(key, base + static_cast<uint64_t>(x.numel()));
  return {dropoutBackward(x, mask, p), mask};
}

Tensor dropoutBackward(const Tensor& gy, const Tensor& mask, double p) {
  Tensor g = gy.to(DType::f64).contiguous(), gx = Tensor::empty(gy.shape(), DType::f64);
  auto m = mask.toVector<uint8_t>();
  const double scale = p >= 1.0 ? 0.0 : 1.0 / (1.0 - p);
  for (int64_t i = 0; i < gy.numel(); ++i) gx.data<double>()[i] = m[i] ? g.data<double>()[i] * scale : 0.0;
  return gx.to(gy.dtype());
}

const DropoutKernels kDropout{LOCKSTEP_DROPOUT_OPS(LOCKSTEP_KERNEL_ENTRY)};

}  // namespace lockstep::kernels::reference
