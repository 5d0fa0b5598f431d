#include "lockstep/data/transforms/random_horizontal_flip.h"

#include "lockstep/util/error.h"

namespace lockstep::data {

RandomHorizontalFlip::RandomHorizontalFlip(const RandomHorizontalFlipOptions& options) : options_(options) {
  LOCKSTEP_ENFORCE(options.p >= 0.0 && options.p <= 1.0, ValueError,
                   "RandomHorizontalFlip: p must be in [0, 1], got ", options.p);
}

bool RandomHorizontalFlip::flips(const TransformContext& ctx) const {
  return unitFromWord(imageRandom(ctx, 0)[0]) < options_.p;
}

Image RandomHorizontalFlip::apply(Image image, const TransformContext& ctx) const {
  if (flips(ctx)) flipImageHorizontally(image);
  return image;
}

}  // namespace lockstep::data
