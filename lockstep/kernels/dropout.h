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
/// Where a kernel's Philox draws start: the generator's key and first counter. Eagerly those values
/// themselves. In a step being captured into a CUDA graph (kernels/philox_capture.h) they would be
/// baked into the graph, so `device` points instead at {key, base} in device memory, which the
/// host rewrites before each replay, and `offset` is the counters the generator had drawn since the
/// capture began: the draws start at base + offset.
struct PhiloxState {
  uint64_t key = 0;
  uint64_t offset = 0;
  const uint64_t* device = nullptr;
  /// The key and first counter as values (in a kernel: device memory read once per thread).
  LOCKSTEP_HOST_DEVICE PhiloxState resolved() const {
    return device ? PhiloxState{device[0], device[1] + offset, nullptr} : *this;
  }
};

/// The state the next draws of gen by a kernel on `device` start from: {gen.seed(), gen.offset()},
/// or, while a PhiloxCapture for that GPU is active on this thread, gen's slot in it. The caller
/// still advances gen by the counters it draws.
PhiloxState philoxState(Generator& gen, const Device& device);

/// out[c] = scale where the draw at counter base + c is kept (dropoutKeepsBelow), 0 where it is
/// dropped, for c < n: bit for bit that function's decisions, 64 counters (16 Philox calls) at a time
/// with AVX-512 or 32 with AVX2 where the CPU has them. Attention's dropout spends its time here.
void dropoutScales(uint64_t base, int64_t n, uint64_t key, uint64_t threshold, float scale, float* out);
/// The instruction sets dropoutScales picks from (the widest the CPU has: AVX-512, 64 counters at a
/// time, else AVX2, else one counter at a time).
enum class PhiloxIsa { scalar, avx2, avx512 };
/// dropoutScales with the given instruction set, for tests and benchmarks; false (nothing written)
/// where this CPU lacks it.
bool dropoutScalesWith(PhiloxIsa isa, uint64_t base, int64_t n, uint64_t key, uint64_t threshold, float scale,
                       float* out);

/// {y = x * mask / (1 - p), mask (u8, 1 = kept, x's shape, contiguous)}; y is contiguous.
/// p in [0, 1); p == 1 zeroes everything. On a GPU the same mask as on the host (the same Philox
/// draws), computed on the device.
std::pair<Tensor, Tensor> dropoutForward(const Tensor& x, double p, Generator& gen);
/// dL/dx = gy * mask / (1 - p).
Tensor dropoutBackward(const Tensor& gy, const Tensor& mask, double p);

}  // namespace lockstep::kernels
