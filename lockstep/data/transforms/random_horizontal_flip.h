#pragma once
#include "lockstep/data/transforms/image_transform.h"

namespace lockstep::data {

struct RandomHorizontalFlipOptions {
  double p = 0.5;  // probability of flipping
};

/// torchvision's RandomHorizontalFlip(p) on a decoded image; the coin is word 0 of
/// imageRandom(ctx, 0). (HorizontalFlip is the same for f32 [C, H, W] tensors.) Immutable.
class RandomHorizontalFlip : public ImageTransform {
 public:
  /// ValueError unless 0 <= p <= 1.
  explicit RandomHorizontalFlip(const RandomHorizontalFlipOptions& options = {});
  Image apply(Image image, const TransformContext& ctx) const override;
  std::string name() const override { return "RandomHorizontalFlip"; }
  std::optional<bool> mirrorsOnly(const TransformContext& ctx) const override { return flips(ctx); }

 private:
  bool flips(const TransformContext& ctx) const;
  RandomHorizontalFlipOptions options_;
};

}  // namespace lockstep::data
