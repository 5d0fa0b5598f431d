#pragma once
// A counter-based random generator (Philox 4x32-10, as in Salmon et al. 2011 and cuRAND/PyTorch).
// Element i of a fill draws from counter (offset + i), so the values depend only on the seed and
// the element's index: never on the thread count or on how the work is split.
#include <array>
#include <cstdint>

#include "lockstep/tensor/tensor.h"

namespace lockstep {

/// Philox 4x32-10: 4 random 32-bit words for a 128-bit counter under a 64-bit key.
std::array<uint32_t, 4> philox4x32(uint64_t counter_lo, uint64_t counter_hi, uint64_t key);

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  /// How many counters have been consumed; (seed, offset) is the whole state.
  uint64_t offset() const { return offset_; }
  void setState(uint64_t seed, uint64_t offset) {
    seed_ = seed;
    offset_ = offset;
  }

  /// Next random 64-bit value.
  uint64_t nextU64();
  /// Uniform in [0, 1) (double precision).
  double nextDouble();
  /// Uniform integer in [0, n); n > 0.
  uint64_t nextBelow(uint64_t n);

  /// Fills a floating tensor with U[low, high).
  void uniform(Tensor& t, double low, double high);
  /// Fills a floating tensor with N(mean, std^2) (Box-Muller).
  void normal(Tensor& t, double mean, double std);
  /// Fills a u8 tensor with 1 with probability p, else 0.
  void bernoulli(Tensor& t, double p);

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

/// The process-wide default generator (seedable, like torch.manual_seed).
Generator& defaultGenerator();
void manualSeed(uint64_t seed);

}  // namespace lockstep
