#pragma once
#include "lockstep/data/transforms/image_transform.h"

namespace lockstep::data {

struct RandomResizedCropOptions {
  int64_t height = 224;  // output size
  int64_t width = 224;
  double scale_min = 0.08;  // the crop's area as a fraction of the image's, uniform in [min, max]
  double scale_max = 1.0;
  double ratio_min = 3.0 / 4.0;  // the crop's width / height, log-uniform in [min, max]
  double ratio_max = 4.0 / 3.0;
};

/// A window of an image: rows [top, top + height), columns [left, left + width).
struct CropBox {
  int64_t top = 0;
  int64_t left = 0;
  int64_t height = 0;
  int64_t width = 0;
};

/// torchvision's RandomResizedCrop(size, scale, ratio) with BILINEAR (antialiased) resizing: a
/// random window chosen by cropBox, cut out, then resized to height x width (resizeImage).
/// Thread-safety: immutable.
class RandomResizedCrop : public ImageTransform {
 public:
  /// ValueError unless height, width >= 1, 0 < scale_min <= scale_max and 0 < ratio_min <= ratio_max.
  explicit RandomResizedCrop(const RandomResizedCropOptions& options = {});
  Image apply(Image image, const TransformContext& ctx) const override;
  std::string name() const override;

  /// torchvision's get_params: up to 10 tries of area = image area * U(scale), aspect ratio =
  /// exp(U(log ratio_min, log ratio_max)), w = round(sqrt(area * ratio)), h = round(sqrt(area / ratio))
  /// (Python's round); the first that fits the image is placed uniformly at random. If none fits,
  /// the centred crop of the whole image clamped to the ratio range. Try t draws from
  /// imageRandom(ctx, t). Pure.
  CropBox cropBox(int64_t image_height, int64_t image_width, const TransformContext& ctx) const;

 private:
  RandomResizedCropOptions options_;
};

}  // namespace lockstep::data
