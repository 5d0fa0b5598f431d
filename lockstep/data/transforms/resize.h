#pragma once
#include "lockstep/data/transforms/image_transform.h"

namespace lockstep::data {

struct ResizeOptions {
  int64_t size = 0;  // > 0: the shorter side becomes size, the aspect ratio is kept (torchvision's int size)
  int64_t height = 0;  // with width, instead of size: this exact size (torchvision's (h, w))
  int64_t width = 0;
};

/// torchvision's Resize(size) on a PIL image with BILINEAR interpolation (antialiased when
/// downscaling): shorterSideSize for an int size, then resizeImage. Deterministic; immutable.
class Resize : public ImageTransform {
 public:
  /// ValueError unless exactly one of size > 0 or (height > 0, width > 0) is given.
  explicit Resize(const ResizeOptions& options);
  Image apply(Image image, const TransformContext& ctx) const override;
  std::string name() const override;

 private:
  ResizeOptions options_;
};

}  // namespace lockstep::data
