#include "lockstep/data/transforms/resize.h"

#include "lockstep/data/transforms/image_resize.h"
#include "lockstep/util/error.h"

namespace lockstep::data {

Resize::Resize(const ResizeOptions& options) : options_(options) {
  const bool by_side = options.size > 0 && options.height == 0 && options.width == 0;
  const bool exact = options.size == 0 && options.height > 0 && options.width > 0;
  LOCKSTEP_ENFORCE(
      by_side || exact, ValueError, "Resize: give size > 0 (the shorter side) or height > 0 and ",
      "width > 0, not both; got size=", options.size, " height=", options.height, " width=", options.width);
}

std::string Resize::name() const {
  if (options_.size > 0) return "Resize(" + std::to_string(options_.size) + ")";
  return "Resize(" + std::to_string(options_.height) + "x" + std::to_string(options_.width) + ")";
}

Image Resize::apply(Image image, const TransformContext&) const {
  LOCKSTEP_ENFORCE(image.height >= 1 && image.width >= 1, ValueError, name(), ": cannot resize an empty ",
                   image.describe());
  if (options_.size == 0) return resizeImage(image, options_.height, options_.width);
  const ImageSize s = shorterSideSize(image.height, image.width, options_.size);
  return resizeImage(image, s.height, s.width);
}

}  // namespace lockstep::data
