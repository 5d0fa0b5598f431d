#pragma once
#include "lockstep/data/transforms/image_transform.h"

namespace lockstep::data {

/// torchvision's ColorJitter(brightness, contrast, saturation, hue): brightness, contrast and
/// saturation x >= 0 give a factor uniform in [max(0, 1 - x), 1 + x], hue h in [0, 0.5] a shift
/// uniform in [-h, h] (0 = leave that adjustment out).
struct ColorJitterOptions {
  double brightness = 0.0;
  double contrast = 0.0;
  double saturation = 0.0;
  double hue = 0.0;
};

/// Applies adjustBrightness / adjustContrast / adjustSaturation / adjustHue in a random order
/// (torchvision's randperm of the four), each with its random factor. The factors are words 0..3 of
/// imageRandom(ctx, 0), the order comes from block 1. Thread-safety: immutable.
class ColorJitter : public ImageTransform {
 public:
  /// ValueError for a negative factor or a hue outside [0, 0.5].
  explicit ColorJitter(const ColorJitterOptions& options);
  Image apply(Image image, const TransformContext& ctx) const override;
  std::string name() const override;

  /// The adjustments' order (0 brightness, 1 contrast, 2 saturation, 3 hue: torchvision's numbering)
  /// and the factors for ctx.
  struct Params {
    std::array<int, 4> order{};
    double brightness = 1.0, contrast = 1.0, saturation = 1.0, hue = 0.0;
  };
  Params params(const TransformContext& ctx) const;

 private:
  ColorJitterOptions options_;
};

}  // namespace lockstep::data
