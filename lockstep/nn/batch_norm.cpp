#include "lockstep/nn/batch_norm.h"

#include "lockstep/autograd/ops/batch_norm.h"
#include "lockstep/kernels/binary.h"

namespace lockstep::nn {

BatchNorm2d::BatchNorm2d(const BatchNorm2dOptions& options) : Module("BatchNorm2d"), options_(options) {
  LOCKSTEP_ENFORCE(options.num_features > 0, ValueError, "BatchNorm2d: num_features must be positive, got ",
                   options.num_features);
  const int64_t c = options.num_features;
  if (options.affine) {
    weight_ = registerParameter("weight", Tensor::ones({c}));
    bias_ = registerParameter("bias", Tensor::zeros({c}));
  }
  if (options.track_running_stats) {
    registerBuffer("running_mean", Tensor::zeros({c}));
    registerBuffer("running_var", Tensor::ones({c}));
    registerBuffer("num_batches_tracked", Tensor::scalar(0, DType::i64));
  }
}

namespace {
// n += 1 where n lives: on a GPU by a kernel into n's own storage (no host read, and a CUDA graph
// replay of the step advances it too).
void bumpBatchesTracked(Tensor& n) {
  if (n.isCuda()) {
    n.copyFrom(kernels::binaryScalar(kernels::BinaryOp::add, n, 1.0));
  } else {
    n.fill(static_cast<double>(n.item<int64_t>() + 1));
  }
}
}  // namespace

int64_t BatchNorm2d::numBatchesTracked() {
  return options_.track_running_stats ? buffer("num_batches_tracked").item<int64_t>() : 0;
}

Variable BatchNorm2d::normalise(const Variable& x, const Variable* residual) {
  LOCKSTEP_ENFORCE(x.dim() == 4 && x.size(1) == options_.num_features, ValueError, "BatchNorm2d(",
                   options_.num_features, "): expected input [N, ", options_.num_features, ", H, W], got ",
                   shapeToString(x.shape()));
  autograd::BatchNormOptions o;
  o.training = isTraining() || !options_.track_running_stats;
  o.momentum = options_.momentum;
  o.eps = options_.eps;
  Tensor mean, var;
  if (options_.track_running_stats) {
    mean = buffer("running_mean");
    var = buffer("running_var");
    if (isTraining()) bumpBatchesTracked(buffer("num_batches_tracked"));
  }
  if (residual) return autograd::batchNorm2dRelu(x, weight_, bias_, mean, var, o, *residual);
  return autograd::batchNorm2d(x, weight_, bias_, mean, var, o);
}

Variable BatchNorm2d::forward(const Variable& x) { return normalise(x, nullptr); }

Variable BatchNorm2d::forwardRelu(const Variable& x, const Variable& residual) {
  return normalise(x, &residual);
}

std::string BatchNorm2d::extraRepr() const {
  return detail::concat(options_.num_features, ", eps=", options_.eps, ", momentum=", options_.momentum,
                        ", affine=", options_.affine ? "true" : "false",
                        ", track_running_stats=", options_.track_running_stats ? "true" : "false");
}

}  // namespace lockstep::nn
