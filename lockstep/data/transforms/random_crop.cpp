#include "lockstep/data/transforms/random_crop.h"

#include <algorithm>
#include <vector>

namespace lockstep::data {

RandomCrop::RandomCrop(const RandomCropOptions& options) : options_(options) {
  LOCKSTEP_ENFORCE(options.padding >= 0, ValueError, "RandomCrop: padding must be >= 0, got ",
                   options.padding);
  LOCKSTEP_ENFORCE(!options.fill.empty(), ValueError,
                   "RandomCrop: fill needs a value (one per channel, or one)");
}

std::string RandomCrop::name() const {
  return "RandomCrop(padding=" + std::to_string(options_.padding) + ")";
}

void RandomCrop::apply(Tensor& input, const TransformContext& ctx) const {
  checkInput(input, 3);
  const std::vector<float>& fills = options_.fill;
  LOCKSTEP_ENFORCE(fills.size() == 1 || static_cast<int64_t>(fills.size()) == input.size(0), ValueError,
                   "RandomCrop: ", fills.size(), " fill values for an image of ", input.size(0), " channels");
  const int64_t p = options_.padding;
  if (p == 0) return;
  const auto r = transformRandom(ctx);
  // Window origin in the padded image, uniform over [0, 2p]; shift relative to the original.
  const int64_t dy = static_cast<int64_t>(unitFromWord(r[0]) * static_cast<double>(2 * p + 1)) - p;
  const int64_t dx = static_cast<int64_t>(unitFromWord(r[1]) * static_cast<double>(2 * p + 1)) - p;
  if (dy == 0 && dx == 0) return;
  const int64_t channels = input.size(0), h = input.size(1), w = input.size(2);
  float* data = input.data<float>();
  std::vector<float> src(data, data + input.numel());
  for (int64_t c = 0; c < channels; ++c) {
    const float* s = src.data() + c * h * w;
    float* d = data + c * h * w;
    const float fill = fills.size() == 1 ? fills[0] : fills[static_cast<size_t>(c)];
    for (int64_t y = 0; y < h; ++y) {
      const int64_t sy = y + dy;
      float* row = d + y * w;
      if (sy < 0 || sy >= h) {
        std::fill(row, row + w, fill);
        continue;
      }
      for (int64_t x = 0; x < w; ++x) {
        const int64_t sx = x + dx;
        row[x] = (sx < 0 || sx >= w) ? fill : s[sy * w + sx];
      }
    }
  }
}

}  // namespace lockstep::data
