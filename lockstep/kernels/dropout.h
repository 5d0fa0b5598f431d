#pragma once
// Dropout with a counter-based mask: element i (in row-major order) is kept when the Philox draw
// at counter gen.offset() + i is >= p, exactly as gen.bernoulli(mask, 1 - p) would decide. The
// mask therefore depends only on the generator's state, never on the thread count; the generator
// advances by numel.
#include <utility>

#include "lockstep/tensor/generator.h"
#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels {

/// {y = x * mask / (1 - p), mask (u8, 1 = kept, x's shape, contiguous)}; y is contiguous.
/// p in [0, 1); p == 1 zeroes everything.
std::pair<Tensor, Tensor> dropoutForward(const Tensor& x, double p, Generator& gen);
/// dL/dx = gy * mask / (1 - p).
Tensor dropoutBackward(const Tensor& gy, const Tensor& mask, double p);

namespace reference {
std::pair<Tensor, Tensor> dropoutForward(const Tensor& x, double p, Generator& gen);
Tensor dropoutBackward(const Tensor& gy, const Tensor& mask, double p);
}  // namespace reference

}  // namespace lockstep::kernels
