#pragma once
#include "lockstep/data/datasets/tensor_dataset.h"

namespace lockstep::data {

struct SyntheticRegressionOptions {
  int64_t size = 2048;  // the toy DDP example: 2048 samples of torch.rand(20) -> 1
  int64_t in_features = 20;
  int64_t out_features = 1;
  double noise_std = 0.01;  // Gaussian noise added to the teacher's output
  uint64_t seed = 0;
};

/// A learnable regression set for a Linear(in_features, out_features) model: inputs ~ U[0, 1)
/// (like torch.rand), targets = W x + b + noise with a fixed random teacher W ~ N(0, 1/in),
/// b ~ N(0, 1). Targets are f32 [out_features] per sample ([B, out_features] per batch).
/// Drawn from Philox Generator(seed) in the order W, b, inputs, noise.
/// Thread-safety: immutable after construction.
class SyntheticRegressionDataset : public TensorDataset {
 public:
  /// ValueError for size < 0, features < 1 or noise_std < 0.
  explicit SyntheticRegressionDataset(const SyntheticRegressionOptions& options = {});
  const SyntheticRegressionOptions& options() const { return options_; }
  /// Teacher weight f32 [out, in] and bias f32 [out].
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }

 private:
  SyntheticRegressionOptions options_;
  Tensor weight_;
  Tensor bias_;
};

}  // namespace lockstep::data
