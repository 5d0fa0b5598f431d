#include "lockstep/data/transforms/horizontal_flip.h"

#include <algorithm>

namespace lockstep::data {

HorizontalFlip::HorizontalFlip(const HorizontalFlipOptions& options) : options_(options) {
  LOCKSTEP_ENFORCE(options.p >= 0.0 && options.p <= 1.0, ValueError,
                   "HorizontalFlip: p must be in [0, 1], got ", options.p);
}

void HorizontalFlip::apply(Tensor& input, const TransformContext& ctx) const {
  checkInput(input, 3);
  if (!(unitFromWord(transformRandom(ctx)[0]) < options_.p)) return;
  const int64_t rows = input.size(0) * input.size(1), w = input.size(2);
  float* data = input.data<float>();
  for (int64_t r = 0; r < rows; ++r) std::reverse(data + r * w, data + (r + 1) * w);
}

}  // namespace lockstep::data
