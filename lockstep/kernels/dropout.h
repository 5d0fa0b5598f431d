#pragma once
// Dropout with a counter-based mask: element i (in row-major order) is kept when the Philox draw
// at counter gen.offset() + i is >= p, exactly as gen.bernoulli(mask, 1 - p) would decide. The
// mask therefore depends only on the generator's state, never on the thread count; the generator
// advances by numel.
#include <cstdint>
#include <utility>

#include "lockstep/tensor/generator.h"
#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels {

/// The Generator's u01 (53 random bits from the first two Philox words at counter under key):
/// the one definition of "element at counter is kept with probability keep", shared by dropout and
/// by attention's dropout (which recomputes the decision in backward instead of storing a mask).
inline bool dropoutKeeps(uint64_t counter, uint64_t key, double keep) {
  auto r = philox4x32(counter, 0, key);
  const uint64_t x = (static_cast<uint64_t>(r[0]) << 21) ^ (r[1] >> 11);
  return static_cast<double>(x & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0) < keep;
}

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
