#pragma once
// Dropout with a counter-based mask: element i (in row-major order) draws counter gen.offset() + i and
// is kept with probability 1 - p (dropoutKeepsBelow). The mask therefore depends only on the
// generator's state, never on the thread count; the generator advances by numel.
#include <cmath>
#include <cstdint>
#include <utility>

#include "lockstep/tensor/generator.h"
#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels {

/// The Philox stream dropout draws from (the counter's high 64 bits): disjoint from the generator's
/// own fills (high word 0) and the data transforms' (the epoch), under any key.
constexpr uint64_t kDropoutStream = 0x44524F5000000000ull;  // "DROP"

/// The one definition of "the element at counter is kept with probability keep", shared by dropout,
/// by attention's dropout (which recomputes it in backward instead of storing a mask) and by the GPU:
/// word counter % 4 of the Philox call at counter / 4 in kDropoutStream, as a 32-bit integer, is below
/// dropoutThreshold(keep) = ceil(keep * 2^32). One call serves four consecutive counters, as
/// PyTorch's CUDA dropout uses its four words.
inline uint64_t dropoutThreshold(double keep) {
  return static_cast<uint64_t>(std::ceil(keep * 4294967296.0));
}
LOCKSTEP_HOST_DEVICE inline bool dropoutKeepsBelow(uint64_t counter, uint64_t key, uint64_t threshold) {
  const auto r = philox4x32(counter >> 2, kDropoutStream, key);
  return r[counter & 3] < threshold;
}
inline bool dropoutKeeps(uint64_t counter, uint64_t key, double keep) {
  return dropoutKeepsBelow(counter, key, dropoutThreshold(keep));
}
/// out[c] = scale where the draw at counter base + c is kept (dropoutKeepsBelow), 0 where it is
/// dropped, for c < n: bit for bit that function's decisions, 32 counters (8 Philox calls) at a time
/// with AVX2 where the CPU has it. Attention's dropout spends its time here.
void dropoutScales(uint64_t base, int64_t n, uint64_t key, uint64_t threshold, float scale, float* out);

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
