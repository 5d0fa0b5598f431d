#pragma once
#include "lockstep/data/image_transform.h"

namespace lockstep::data {

/// torchvision's ColorJitter(brightness, contrast, saturation): each factor x >= 0 gives a factor
/// uniform in [max(0, 1 - x), 1 + x] (0 = leave it alone). Hue is not implemented yet.
struct ColorJitterOptions {
  double brightness = 0.0;
  double contrast = 0.0;
  double saturation = 0.0;
};

/// Applies adjustBrightness / adjustContrast / adjustSaturation in a random order (torchvision's
/// randperm of the adjustments), each with its random factor. The factors are words 0..2 of
/// imageRandom(ctx, 0), the order comes from block 1. Thread-safety: immutable.
class ColorJitter : public ImageTransform {
 public:
  /// ValueError for a negative factor.
  explicit ColorJitter(const ColorJitterOptions& options);
  Image apply(Image image, const TransformContext& ctx) const override;
  std::string name() const override;

  /// The adjustments' order (0 brightness, 1 contrast, 2 saturation, 3 hue: torchvision's numbering)
  /// and the factors for ctx.
  struct Params {
    std::array<int, 4> order{};
    double brightness = 1.0, contrast = 1.0, saturation = 1.0;
  };
  Params params(const TransformContext& ctx) const;

 private:
  ColorJitterOptions options_;
};

}  // namespace lockstep::data
