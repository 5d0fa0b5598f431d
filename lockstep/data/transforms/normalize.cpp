#include "lockstep/data/transforms/normalize.h"

namespace lockstep::data {

Normalize::Normalize(const NormalizeOptions& options) {
  LOCKSTEP_ENFORCE(!options.mean.empty() && options.mean.size() == options.std.size(), ValueError,
                   "Normalize: need one mean and one std per channel, got ", options.mean.size(),
                   " means and ", options.std.size(), " stds");
  for (size_t c = 0; c < options.mean.size(); ++c) {
    LOCKSTEP_ENFORCE(options.std[c] > 0, ValueError, "Normalize: std of channel ", c, " must be > 0, got ",
                     options.std[c]);
    mean_.push_back(static_cast<float>(options.mean[c]));
    inv_std_.push_back(static_cast<float>(1.0 / options.std[c]));
  }
}

void Normalize::apply(Tensor& input, const TransformContext&) const {
  checkInput(input, 0);
  const int64_t channels = input.size(0);
  LOCKSTEP_ENFORCE(channels == static_cast<int64_t>(mean_.size()), ValueError, "Normalize: configured for ",
                   mean_.size(), " channels, input ", input.describe(), " has ", channels);
  const int64_t plane = channels == 0 ? 0 : input.numel() / channels;
  float* p = input.data<float>();
  for (int64_t c = 0; c < channels; ++c) {
    const float m = mean_[static_cast<size_t>(c)], s = inv_std_[static_cast<size_t>(c)];
    for (int64_t i = 0; i < plane; ++i) p[c * plane + i] = (p[c * plane + i] - m) * s;
  }
}

}  // namespace lockstep::data
