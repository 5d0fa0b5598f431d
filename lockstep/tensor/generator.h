#pragma once
// A counter-based random generator (Philox 4x32-10, as in Salmon et al. 2011 and cuRAND/PyTorch).
// Element i of a fill draws from counter (offset + i), so the values depend only on the seed and
// the element's index: never on the thread count or on how the work is split.
#include <array>
#include <cstdint>
#include <functional>

#include "lockstep/tensor/tensor.h"

namespace lockstep {

// Functions callable from CUDA kernels too (the GPU draws the same numbers: kernels/cuda/dropout.cu).
#ifdef __CUDACC__
#define LOCKSTEP_HOST_DEVICE __host__ __device__
#else
#define LOCKSTEP_HOST_DEVICE
#endif

/// Philox 4x32's round multipliers (M) and Weyl key increments (W), from Salmon et al. 2011; also
/// used by the vectorised copy of philox4x32 in kernels/cpu/dropout.cpp.
inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u, kPhiloxM1 = 0xCD9E8D57u;
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u, kPhiloxW1 = 0xBB67AE85u;

/// Philox 4x32-10: 4 random 32-bit words for a 128-bit counter under a 64-bit key. Inline and
/// fully unrolled so that loops drawing one counter per element vectorise (attention's dropout).
LOCKSTEP_HOST_DEVICE inline std::array<uint32_t, 4> philox4x32(uint64_t counter_lo, uint64_t counter_hi,
                                                               uint64_t key) {
  uint32_t c0 = static_cast<uint32_t>(counter_lo), c1 = static_cast<uint32_t>(counter_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(counter_hi), c3 = static_cast<uint32_t>(counter_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
#ifdef __CUDACC__
#pragma unroll
#else
#pragma GCC unroll 10
#endif
  for (int r = 0; r < 10; ++r) {
    const uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
  return {c0, c1, c2, c3};
}

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

  /// A replica's share of a batch drawn as one process draws the whole batch (a pipeline stage's
  /// replicas: parallel/pipeline/pipeline_stage.h). This rank holds samples j * replicas + replica
  /// of the one-process batch (the strided DistributedSampler's layout); batch-major draws
  /// (autograd's dropout and attention's dropout) take those samples' counters and advance the
  /// generator by the whole batch's. {1, 0}: off, the default.
  struct BatchShare {
    int64_t replicas = 1, replica = 0;
  };
  void setBatchShare(BatchShare share) { share_ = share; }
  BatchShare batchShare() const { return share_; }

  /// Next random 64-bit value.
  uint64_t nextU64();
  /// Uniform in [0, 1) (double precision).
  double nextDouble();
  /// Uniform integer in [0, n); n > 0.
  uint64_t nextBelow(uint64_t n);

  // The fills below draw counter (offset + i) for element i and advance the offset by numel(). On a
  // deferred tensor (tensor/deferred_init.h) they record the draw, to replay from the same state.

  /// Fills a floating tensor with U[low, high).
  void uniform(Tensor& t, double low, double high);
  /// Fills a floating tensor with N(mean, std^2) (Box-Muller).
  void normal(Tensor& t, double mean, double std);
  /// Fills a u8 tensor with 1 with probability p, else 0.
  void bernoulli(Tensor& t, double p);

 private:
  /// Records fill(generator at this state, t) when t is deferred and advances the offset; false
  /// otherwise.
  bool deferFill(const Tensor& t, std::function<void(Generator&, Tensor&)> fill);

  uint64_t seed_;
  uint64_t offset_ = 0;
  BatchShare share_{};
};

/// Sets a generator's batch share for a scope and puts the previous one back however it ends.
class BatchShareScope {
 public:
  BatchShareScope(Generator& gen, Generator::BatchShare share) : gen_(gen), previous_(gen.batchShare()) {
    gen.setBatchShare(share);
  }
  ~BatchShareScope() { gen_.setBatchShare(previous_); }
  BatchShareScope(const BatchShareScope&) = delete;
  BatchShareScope& operator=(const BatchShareScope&) = delete;

 private:
  Generator& gen_;
  Generator::BatchShare previous_;
};

/// The process-wide default generator (seedable, like torch.manual_seed).
Generator& defaultGenerator();
void manualSeed(uint64_t seed);

}  // namespace lockstep
