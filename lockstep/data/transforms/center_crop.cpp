#include "lockstep/data/transforms/center_crop.h"

#include <cmath>

#include "lockstep/util/error.h"

namespace lockstep::data {
namespace {

// torchvision's offset along one side: pad (crop - size) // 2 in front if the side is too short,
// then int(round((padded - crop) / 2.0)); round() of a half goes to the even neighbour.
int64_t offset(int64_t size, int64_t crop) {
  if (crop > size) return -((crop - size) / 2);  // padded side: the crop is the whole padded extent
  return static_cast<int64_t>(std::nearbyint(static_cast<double>(size - crop) / 2.0));
}

}  // namespace

CenterCrop::CenterCrop(const CenterCropOptions& options) : options_(options) {
  LOCKSTEP_ENFORCE(options.height >= 1 && options.width >= 1, ValueError,
                   "CenterCrop: height and width must be >= 1, got ", options.height, "x", options.width);
}

std::string CenterCrop::name() const {
  return "CenterCrop(" + std::to_string(options_.height) + "x" + std::to_string(options_.width) + ")";
}

std::array<int64_t, 2> CenterCrop::offsets(int64_t image_height, int64_t image_width, int64_t crop_height,
                                           int64_t crop_width) {
  return {offset(image_height, crop_height), offset(image_width, crop_width)};
}

Image CenterCrop::apply(Image image, const TransformContext&) const {
  const auto [top, left] = offsets(image.height, image.width, options_.height, options_.width);
  return cropImage(image, top, left, options_.height, options_.width);
}

}  // namespace lockstep::data
