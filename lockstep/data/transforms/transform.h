#pragma once
// Per-sample input transforms (augmentation). Randomness is counter-based: a transform's draws
// depend only on (seed, epoch, sample index, slot), never on which worker thread loads the sample,
// so a DataLoader yields identical batches for any num_workers.
#include <array>
#include <cstdint>
#include <string>

#include "lockstep/tensor/tensor.h"

namespace lockstep::data {

/// Identifies one application of a transform.
struct TransformContext {
  uint64_t seed = 0;   // the pipeline's seed
  uint64_t epoch = 0;  // set through Dataset::setEpoch
  int64_t index = 0;   // the sample's index in the transformed dataset
  uint32_t slot = 0;   // the transform's position in the pipeline (independent streams)
};

/// Four random 32-bit words for ctx: Philox(counter = (index, epoch), key = seed mixed with slot).
std::array<uint32_t, 4> transformRandom(const TransformContext& ctx);
/// Uniform in [0, 1) from one random word.
inline double unitFromWord(uint32_t w) { return w * (1.0 / 4294967296.0); }

/// A shape-preserving, in-place transform of one sample's input.
/// Thread-safety: apply() is const and is called concurrently from DataLoader workers.
class Transform {
 public:
  virtual ~Transform() = default;
  /// Transforms `input` (a contiguous f32 [C, ...] tensor, usually a row of a batch) in place.
  /// ValueError when the input's shape or dtype does not suit the transform.
  virtual void apply(Tensor& input, const TransformContext& ctx) const = 0;
  /// For messages: "Normalize", "RandomCrop(padding=4)", ...
  virtual std::string name() const = 0;

 protected:
  /// ValueError unless input is a contiguous f32 tensor with `dims` dims (0 = any >= 1).
  void checkInput(const Tensor& input, int64_t dims) const;
};

}  // namespace lockstep::data
