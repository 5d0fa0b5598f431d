#pragma once
// BatchNorm2d (torch.nn.BatchNorm2d): per-channel normalisation of [N, C, H, W] with learnable
// weight (1) and bias (0), and running statistics kept as buffers running_mean (0), running_var (1)
// and num_batches_tracked (i64 0-d, counts training forwards), all saved in stateDict(). All of them
// live on the module's device; a GPU advances the counter with a kernel.
#include <cstdint>

#include "lockstep/nn/module.h"

namespace lockstep::nn {

struct BatchNorm2dOptions {
  int64_t num_features = 0;
  double eps = 1e-5;
  /// running = (1 - momentum) * running + momentum * batch statistic (unbiased variance).
  double momentum = 0.1;
  bool affine = true;
  bool track_running_stats = true;
};

class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(const BatchNorm2dOptions& options);
  /// Training mode (or no running stats): batch statistics, and the running ones are updated.
  /// Eval mode: the running statistics.
  Variable forward(const Variable& x) override;
  /// relu(forward(x) + residual), residual optional: a ResNet block's tail in the normalisation's
  /// passes (autograd::batchNorm2dRelu).
  Variable forwardRelu(const Variable& x, const Variable& residual = Variable());
  std::string extraRepr() const override;

  const Variable& weight() const { return weight_; }
  const Variable& bias() const { return bias_; }
  /// Undefined when track_running_stats is false.
  Tensor runningMean() { return options_.track_running_stats ? buffer("running_mean") : Tensor(); }
  Tensor runningVar() { return options_.track_running_stats ? buffer("running_var") : Tensor(); }
  /// Training forwards counted so far; reads the counter back from a GPU (for tests and logs).
  int64_t numBatchesTracked();
  const BatchNorm2dOptions& options() const { return options_; }

 private:
  // forward (residual null) or forwardRelu.
  Variable normalise(const Variable& x, const Variable* residual);
  BatchNorm2dOptions options_;
  Variable weight_;
  Variable bias_;
};

}  // namespace lockstep::nn
