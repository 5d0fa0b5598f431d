#pragma once
#include "lockstep/data/transforms/image_transform.h"

namespace lockstep::data {

struct CenterCropOptions {
  int64_t height = 224;
  int64_t width = 224;
};

/// torchvision's CenterCrop((height, width)): an image smaller than the crop is first padded with
/// black, (crop - size) // 2 before and the rest after; then the window's offsets are
/// round((size - crop) / 2) with Python's round (halves to even). Deterministic; immutable.
class CenterCrop : public ImageTransform {
 public:
  /// ValueError unless height, width >= 1.
  explicit CenterCrop(const CenterCropOptions& options = {});
  Image apply(Image image, const TransformContext& ctx) const override;
  std::string name() const override;

  /// The crop's top-left corner in an image of that size, padding included (negative = padded).
  static std::array<int64_t, 2> offsets(int64_t image_height, int64_t image_width, int64_t crop_height,
                                        int64_t crop_width);

 private:
  CenterCropOptions options_;
};

}  // namespace lockstep::data
