#pragma once
#include "lockstep/data/transforms/transform.h"

namespace lockstep::data {

struct HorizontalFlipOptions {
  double p = 0.5;  // probability of flipping
};

/// Mirrors a [C, H, W] image left-right with probability p (torchvision's RandomHorizontalFlip);
/// the coin comes from transformRandom(ctx). Thread-safety: immutable.
class HorizontalFlip : public Transform {
 public:
  /// ValueError unless 0 <= p <= 1.
  explicit HorizontalFlip(const HorizontalFlipOptions& options = {});
  void apply(Tensor& input, const TransformContext& ctx) const override;
  std::string name() const override { return "HorizontalFlip"; }

 private:
  HorizontalFlipOptions options_;
};

}  // namespace lockstep::data
