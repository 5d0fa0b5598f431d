#pragma once
// Dropout with a counter-based mask: element i (in row-major order) is kept when the Philox draw
// at counter gen.offset() + i is >= p, exactly as gen.bernoulli(mask, 1 - p) would decide. The
// mask therefore depends only on the generator's state, never on the thread count; the generator
// advances by numel.
#include <cmath>
#include <cstdint>
#include <utility>

#include "lockstep/tensor/generator.h"
#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels {

/// The one definition of "the element at counter is kept with probability keep", shared by dropout
/// and by attention's dropout (which recomputes it in backward instead of storing a mask): the
/// Generator's u01 (53 bits of the first two Philox words, times 2^-53) is < keep. As integers:
/// bits < dropoutThreshold(keep), exact since keep * 2^53 is; the integer form vectorises.
inline uint64_t dropoutThreshold(double keep) {
  return static_cast<uint64_t>(std::ceil(keep * 9007199254740992.0));
}
LOCKSTEP_HOST_DEVICE inline bool dropoutKeepsBelow(uint64_t counter, uint64_t key, uint64_t threshold) {
  const auto r = philox4x32(counter, 0, key);
  return (((static_cast<uint64_t>(r[0]) << 21) ^ (r[1] >> 11)) & ((1ull << 53) - 1)) < threshold;
}
inline bool dropoutKeeps(uint64_t counter, uint64_t key, double keep) {
  return dropoutKeepsBelow(counter, key, dropoutThreshold(keep));
}

/// {y = x * mask / (1 - p), mask (u8, 1 = kept, x's shape, contiguous)}; y is contiguous.
/// p in [0, 1); p == 1 zeroes everything. On a GPU the same mask as on the host (the same Philox
/// draws), computed on the device.
std::pair<Tensor, Tensor> dropoutForward(const Tensor& x, double p, Generator& gen);
/// dL/dx = gy * mask / (1 - p).
Tensor dropoutBackward(const Tensor& gy, const Tensor& mask, double p);

namespace reference {
std::pair<Tensor, Tensor> dropoutForward(const Tensor& x, double p, Generator& gen);
Tensor dropoutBackward(const Tensor& gy, const Tensor& mask, double p);
}  // namespace reference

}  // namespace lockstep::kernels
