#pragma once
#include <vector>

#include "lockstep/data/transforms/transform.h"

namespace lockstep::data {

struct NormalizeOptions {
  std::vector<double> mean;  // one per channel
  std::vector<double> std;   // one per channel, all > 0
};

/// x[c, ...] = (x[c, ...] - mean[c]) / std[c] (torchvision's Normalize). Deterministic.
/// Thread-safety: immutable.
class Normalize : public Transform {
 public:
  /// ValueError when mean and std differ in length, are empty, or a std is not > 0.
  explicit Normalize(const NormalizeOptions& options);
  void apply(Tensor& input, const TransformContext& ctx) const override;
  std::string name() const override { return "Normalize"; }

 private:
  std::vector<float> mean_;
  std::vector<float> inv_std_;
};

}  // namespace lockstep::data
