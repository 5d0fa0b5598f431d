// The CUDA backend's op tables (see kernels/dispatch.h): the kernels of kernels/cuda/, adapted to
// the tables' signatures where one CUDA kernel serves several ops (all activations, softmax and
// log_softmax).
#include "lockstep/kernels/cuda/activation.h"
#include "lockstep/kernels/cuda/attention.h"
#include "lockstep/kernels/cuda/batch_norm.h"
#include "lockstep/kernels/cuda/blas.h"
#include "lockstep/kernels/cuda/concat.h"
#include "lockstep/kernels/cuda/conv.h"
#include "lockstep/kernels/cuda/dropout.h"
#include "lockstep/kernels/cuda/elementwise.h"
#include "lockstep/kernels/cuda/finite.h"
#include "lockstep/kernels/cuda/fused_attention.h"
#include "lockstep/kernels/cuda/layer_norm.h"
#include "lockstep/kernels/cuda/loss.h"
#include "lockstep/kernels/cuda/metrics.h"
#include "lockstep/kernels/cuda/norm.h"
#include "lockstep/kernels/cuda/optimizer.h"
#include "lockstep/kernels/cuda/pool.h"
#include "lockstep/kernels/cuda/reduce.h"
#include "lockstep/kernels/cuda/softmax.h"
#include "lockstep/kernels/cuda/transformer.h"
#include "lockstep/kernels/tables/accumulate.h"
#include "lockstep/kernels/tables/activation.h"
#include "lockstep/kernels/tables/attention.h"
#include "lockstep/kernels/tables/batch_norm.h"
#include "lockstep/kernels/tables/binary.h"
#include "lockstep/kernels/tables/conv.h"
#include "lockstep/kernels/tables/dropout.h"
#include "lockstep/kernels/tables/finite.h"
#include "lockstep/kernels/tables/layer_norm.h"
#include "lockstep/kernels/tables/linear.h"
#include "lockstep/kernels/tables/loss.h"
#include "lockstep/kernels/tables/metrics.h"
#include "lockstep/kernels/tables/norm.h"
#include "lockstep/kernels/tables/optimizer.h"
#include "lockstep/kernels/tables/pool.h"
#include "lockstep/kernels/tables/reduce.h"
#include "lockstep/kernels/tables/scale.h"
#include "lockstep/kernels/tables/shape.h"
#include "lockstep/kernels/tables/softmax.h"
#include "lockstep/kernels/tables/transformer.h"
#include "lockstep/kernels/tables/unary.h"

namespace lockstep::kernels::cuda {

const BinaryKernels kBinary{LOCKSTEP_BINARY_OPS(LOCKSTEP_KERNEL_ENTRY)};

const UnaryKernels kUnary{LOCKSTEP_UNARY_OPS(LOCKSTEP_KERNEL_ENTRY)};

namespace {
template <Activation act>
Tensor forward(const Tensor& x) {
  return activationForward(act, x);
}
template <Activation act>
Tensor backward(const Tensor& gy, const Tensor& saved) {
  return activationBackward(act, gy, saved);
}
}  // namespace

const ActivationKernels kActivation{
    .reluForward = &forward<Activation::relu>,
    .reluBackward = &backward<Activation::relu>,
    .leakyReluForward = [](const Tensor& x,
                           double slope) { return activationForward(Activation::leaky_relu, x, slope); },
    .leakyReluBackward =
        [](const Tensor& gy, const Tensor& x, double slope) {
          return activationBackward(Activation::leaky_relu, gy, x, slope);
        },
    .geluForward = &forward<Activation::gelu>,
    .geluBackward = &backward<Activation::gelu>,
    .geluTanhForward = &forward<Activation::gelu_tanh>,
    .geluTanhBackward = &backward<Activation::gelu_tanh>,
    .siluForward = &forward<Activation::silu>,
    .siluBackward = &backward<Activation::silu>,
    .tanhForward = &forward<Activation::tanh>,
    .tanhBackward = &backward<Activation::tanh>,
    .sigmoidForward = &forward<Activation::sigmoid>,
    .sigmoidBackward = &backward<Activation::sigmoid>,
};

const SoftmaxKernels kSoftmax{
    .softmaxForward = [](const Tensor& x, int64_t dim) { return softmaxForward(x, dim, false); },
    .softmaxBackward = [](const Tensor& gy, const Tensor& y,
                          int64_t dim) { return softmaxBackward(gy, y, dim, false); },
    .logSoftmaxForward = [](const Tensor& x, int64_t dim) { return softmaxForward(x, dim, true); },
    .logSoftmaxBackward = [](const Tensor& gy, const Tensor& y,
                             int64_t dim) { return softmaxBackward(gy, y, dim, true); },
};

const LayerNormKernels kLayerNorm{
    .layerNormForward =
        [](const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
           double eps, DType y_dtype) {
          return layerNormForward(x, shapeNumel(normalized_shape), weight, bias, eps, y_dtype);
        },
    .layerNormBackward =
        [](const Tensor& gy, const Tensor& x, const Tensor& mean, const Tensor& variance,
           const Shape& normalized_shape, const Tensor& weight, const Tensor& bias, double eps) {
          return layerNormBackward(gy, x, mean, variance, shapeNumel(normalized_shape), weight, bias, eps);
        },
};

const BatchNormKernels kBatchNorm{LOCKSTEP_BATCH_NORM_OPS(LOCKSTEP_KERNEL_ENTRY)};

const LinearKernels kLinear{LOCKSTEP_LINEAR_OPS(LOCKSTEP_KERNEL_ENTRY)};

const LinearEpilogueKernels kLinearEpilogue{LOCKSTEP_LINEAR_EPILOGUE_OPS(LOCKSTEP_KERNEL_ENTRY)};

const ConvKernels kConv{LOCKSTEP_CONV_OPS(LOCKSTEP_KERNEL_ENTRY)};

const PoolKernels kPool{LOCKSTEP_POOL_OPS(LOCKSTEP_KERNEL_ENTRY)};

const ReduceKernels kReduce{LOCKSTEP_REDUCE_OPS(LOCKSTEP_KERNEL_ENTRY)};

const ShapeKernels kShape{.concat = [](const std::vector<Tensor>& xs, int64_t dim) {
  int64_t d = 0;
  const Shape out = checkConcat(xs, dim, &d);
  return concat(xs, d, out);
}};

const LossKernels kLoss{LOCKSTEP_LOSS_OPS(LOCKSTEP_KERNEL_ENTRY)};

const LossIntoKernels kLossInto{LOCKSTEP_LOSS_INTO_OPS(LOCKSTEP_KERNEL_ENTRY)};

const AttentionKernels kAttention{LOCKSTEP_ATTENTION_OPS(LOCKSTEP_KERNEL_ENTRY)};
const AttentionIntoKernels kAttentionInto{LOCKSTEP_ATTENTION_INTO_OPS(LOCKSTEP_KERNEL_ENTRY)};

const TransformerKernels kTransformer{
    .embeddingForward = &embeddingForward,
    .embeddingBackward = &embeddingBackward,
    .rmsNormForward = &rmsNormForward,
    .rmsNormBackward = [](const Tensor& gy, const Tensor& x, const Tensor& rstd,
                          const Tensor& weight) { return rmsNormBackward(gy, x, rstd, weight); },
    .swigluForward = &swigluForward,
    .swigluBackward = &swigluBackward,
    .rotaryForward = [](const Tensor& x, const Tensor& cos,
                        const Tensor& sin) { return rotary(x, cos, sin, 1); },
    .rotaryBackward = [](const Tensor& gy, const Tensor& cos,
                         const Tensor& sin) { return rotary(gy, cos, sin, -1); },
};

const DropoutKernels kDropout{
    // The device draws the same counters as the host loop, and the generator advances the same way
    // (in a CUDA graph capture the kernel reads where they start from device memory: philoxState).
    .dropoutForward =
        [](const Tensor& x, double p, Generator& gen) {
          auto r = dropoutForward(x, p, philoxState(gen, x.device()));
          gen.setState(gen.seed(), gen.offset() + static_cast<uint64_t>(x.numel()));
          return r;
        },
    .dropoutBackward = &dropoutBackward,
};

const AccumulateKernels kAccumulate{LOCKSTEP_ACCUMULATE_OPS(LOCKSTEP_KERNEL_ENTRY)};

const GradIntoKernels kGradInto{
    .conv2dBackwardDataInto = &conv2dBackwardDataInto,
    .linearBackwardDataInto = &linearBackwardDataInto,
    .layerNormBackwardInto = [](Tensor& gx, const Tensor& gy, const Tensor& x, const Tensor& mean,
                                const Tensor& variance, const Shape& normalized_shape, const Tensor& weight,
                                const Tensor& bias, double eps) -> std::optional<LayerNormGrads> {
      if (!gx.isContiguous()) return std::nullopt;
      return layerNormBackward(gy, x, mean, variance, shapeNumel(normalized_shape), weight, bias, eps, &gx);
    },
    .rmsNormBackwardInto = [](Tensor& gx, const Tensor& gy, const Tensor& x, const Tensor& rstd,
                              const Tensor& weight) -> std::optional<RmsNormGrads> {
      if (!gx.isContiguous()) return std::nullopt;
      return rmsNormBackward(gy, x, rstd, weight, &gx);
    },
};

const MetricsKernels kMetrics{LOCKSTEP_METRICS_OPS(LOCKSTEP_KERNEL_ENTRY)};

const FiniteKernels kFinite{
    // The bool answers on a GPU: the device check, then one read of its flag.
    .scaleAndCheck =
        [](Tensor& x, double factor, bool scale) {
          Tensor found = Tensor::zeros({1}, DType::f32, x.device());
          checkNonFiniteInto(x, factor, scale, found);
          return found.item<float>() != 0.0f;
        },
    .scaleAndCheckInto = [](Tensor& x, double factor,
                            Tensor& found_inf) { checkNonFiniteInto(x, factor, true, found_inf); },
};

const NormKernels kNorm{
    .norm = [](const Tensor& x, double p) { return totalNorm({x}, p).item<double>(); },
    .totalNorm = &totalNorm,
    .scaleByClipCoefficient = &scaleByClipCoefficient,
};

const OptimizerKernels kOptimizer{LOCKSTEP_OPTIMIZER_OPS(LOCKSTEP_KERNEL_ENTRY)};

// The element-wise kernel computes in f32 (f64 for f64) and rounds once, as the cpu loops do.
const ScaleKernels kScale{
    .scaleInPlace = [](Tensor& x,
                       double factor) { x.copyFrom(cuda::binaryScalar(BinaryOp::mul, x, factor)); },
    .scaleInPlaceBy = &scaleInPlaceBy};

}  // namespace lockstep::kernels::cuda
