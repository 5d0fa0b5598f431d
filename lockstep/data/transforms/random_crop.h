#pragma once
#include <vector>

#include "lockstep/data/transforms/transform.h"

namespace lockstep::data {

struct RandomCropOptions {
  int64_t padding = 4;  // pixels added on every side before cropping back to H x W
  /// Value of the padded pixels: one per channel, or one for every channel. Loaders here normalise
  /// at load time, so torchvision's black padding (before Normalize) is (0 - mean) / std per
  /// channel: DatasetSplits::black. 0 pads with the mean colour.
  std::vector<float> fill{0.0f};
};

/// Pads a [C, H, W] image by `padding` on each side and crops a random H x W window
/// (torchvision's RandomCrop(size=(H, W), padding=p)). The window's offsets come from
/// transformRandom(ctx). Thread-safety: immutable.
class RandomCrop : public Transform {
 public:
  /// ValueError for a negative padding.
  explicit RandomCrop(const RandomCropOptions& options = {});
  void apply(Tensor& input, const TransformContext& ctx) const override;
  std::string name() const override;

 private:
  RandomCropOptions options_;
};

}  // namespace lockstep::data
