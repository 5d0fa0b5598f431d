#include "lockstep/data/transforms/random_resized_crop.h"

#include <algorithm>
#include <cmath>

#include "lockstep/data/transforms/image_resize.h"
#include "lockstep/util/error.h"

namespace lockstep::data {
namespace {

constexpr int kTries = 10;

// Python's int(round(v)): halves go to the even neighbour (the default rounding mode).
int64_t roundHalfEven(double v) { return static_cast<int64_t>(std::nearbyint(v)); }

}  // namespace

RandomResizedCrop::RandomResizedCrop(const RandomResizedCropOptions& options) : options_(options) {
  LOCKSTEP_ENFORCE(options.height >= 1 && options.width >= 1, ValueError,
                   "RandomResizedCrop: the output size must be at least 1x1, got ", options.height, "x",
                   options.width);
  LOCKSTEP_ENFORCE(options.scale_min > 0 && options.scale_min <= options.scale_max, ValueError,
                   "RandomResizedCrop: scale must satisfy 0 < min <= max, got (", options.scale_min, ", ",
                   options.scale_max, ")");
  LOCKSTEP_ENFORCE(options.ratio_min > 0 && options.ratio_min <= options.ratio_max, ValueError,
                   "RandomResizedCrop: ratio must satisfy 0 < min <= max, got (", options.ratio_min, ", ",
                   options.ratio_max, ")");
}

std::string RandomResizedCrop::name() const {
  return "RandomResizedCrop(" + std::to_string(options_.height) + "x" + std::to_string(options_.width) + ")";
}

CropBox RandomResizedCrop::cropBox(int64_t image_height, int64_t image_width,
                                   const TransformContext& ctx) const {
  const double area = static_cast<double>(image_height) * static_cast<double>(image_width);
  const double log_min = std::log(options_.ratio_min), log_max = std::log(options_.ratio_max);
  for (uint32_t t = 0; t < kTries; ++t) {
    const auto r = imageRandom(ctx, t);
    const double target_area =
        area * (options_.scale_min + unitFromWord(r[0]) * (options_.scale_max - options_.scale_min));
    const double aspect = std::exp(log_min + unitFromWord(r[1]) * (log_max - log_min));
    const int64_t w = roundHalfEven(std::sqrt(target_area * aspect));
    const int64_t h = roundHalfEven(std::sqrt(target_area / aspect));
    if (0 < w && w <= image_width && 0 < h && h <= image_height) {
      // torch.randint(0, n + 1): uniform over the n + 1 positions.
      const auto top = static_cast<int64_t>(unitFromWord(r[2]) * static_cast<double>(image_height - h + 1));
      const auto left = static_cast<int64_t>(unitFromWord(r[3]) * static_cast<double>(image_width - w + 1));
      return {top, left, h, w};
    }
  }
  const double in_ratio = static_cast<double>(image_width) / static_cast<double>(image_height);
  int64_t w = image_width, h = image_height;
  if (in_ratio < options_.ratio_min) {
    h = roundHalfEven(static_cast<double>(w) / options_.ratio_min);
  } else if (in_ratio > options_.ratio_max) {
    w = roundHalfEven(static_cast<double>(h) * options_.ratio_max);
  }
  return {(image_height - h) / 2, (image_width - w) / 2, h, w};
}

Image RandomResizedCrop::apply(Image image, const TransformContext& ctx) const {
  LOCKSTEP_ENFORCE(image.height >= 1 && image.width >= 1, ValueError, name(), ": cannot crop an empty ",
                   image.describe());
  const CropBox box = cropBox(image.height, image.width, ctx);
  return resizeImageWindow(image, box.top, box.left, box.height, box.width, options_.height, options_.width);
}

}  // namespace lockstep::data
