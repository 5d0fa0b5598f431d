#include "lockstep/data/transforms/color_jitter.h"

#include <algorithm>
#include <sstream>

#include "lockstep/data/transforms/color_adjust.h"
#include "lockstep/util/error.h"

namespace lockstep::data {
namespace {

double factorIn(double amount, uint32_t word) {
  const double low = std::max(0.0, 1.0 - amount), high = 1.0 + amount;
  return low + unitFromWord(word) * (high - low);
}

}  // namespace

ColorJitter::ColorJitter(const ColorJitterOptions& options) : options_(options) {
  LOCKSTEP_ENFORCE(options.brightness >= 0 && options.contrast >= 0 && options.saturation >= 0, ValueError,
                   "ColorJitter: brightness, contrast and saturation must be >= 0, got ", options.brightness,
                   ", ", options.contrast, ", ", options.saturation);
  LOCKSTEP_ENFORCE(options.hue >= 0 && options.hue <= 0.5, ValueError,
                   "ColorJitter: hue must be in [0, 0.5], got ", options.hue);
}

std::string ColorJitter::name() const {
  std::ostringstream s;
  s << "ColorJitter(brightness=" << options_.brightness << ", contrast=" << options_.contrast
    << ", saturation=" << options_.saturation << ", hue=" << options_.hue << ")";
  return s.str();
}

ColorJitter::Params ColorJitter::params(const TransformContext& ctx) const {
  Params p;
  const auto factors = imageRandom(ctx, 0);
  if (options_.brightness > 0) p.brightness = factorIn(options_.brightness, factors[0]);
  if (options_.contrast > 0) p.contrast = factorIn(options_.contrast, factors[1]);
  if (options_.saturation > 0) p.saturation = factorIn(options_.saturation, factors[2]);
  if (options_.hue > 0) p.hue = -options_.hue + unitFromWord(factors[3]) * 2.0 * options_.hue;
  // A uniform permutation of 0..3 (Fisher-Yates), as torch.randperm(4).
  const auto order = imageRandom(ctx, 1);
  p.order = {0, 1, 2, 3};
  for (int i = 3; i > 0; --i) {
    const auto j = static_cast<int>(unitFromWord(order[static_cast<size_t>(i - 1)]) * (i + 1));
    std::swap(p.order[static_cast<size_t>(i)], p.order[static_cast<size_t>(j)]);
  }
  return p;
}

Image ColorJitter::apply(Image image, const TransformContext& ctx) const {
  LOCKSTEP_ENFORCE(image.channels == 1 || image.channels == 3, ValueError, name(),
                   ": needs a 1-channel (grey) or 3-channel (RGB) image, got ", image.describe());
  const Params p = params(ctx);
  for (int op : p.order) {
    if (op == 0 && options_.brightness > 0) adjustBrightness(image, p.brightness);
    if (op == 1 && options_.contrast > 0) adjustContrast(image, p.contrast);
    if (op == 2 && options_.saturation > 0) adjustSaturation(image, p.saturation);
    if (op == 3 && options_.hue > 0) adjustHue(image, p.hue);
  }
  return image;
}

}  // namespace lockstep::data
