// The CUDA backend's op tables (see kernels/dispatch.h): the kernels of kernels/cuda/, adapted to
// the tables' signatures where one CUDA kernel serves several ops (all activations, softmax and
// log_softmax).
#include "lockstep/kernels/cuda/activation.h"
#include "lockstep/kernels/cuda/elementwise.h"
#include "lockstep/kernels/cuda/softmax.h"
#include "lockstep/kernels/tables/activation.h"
#include "lockstep/kernels/tables/binary.h"
#include "lockstep/kernels/tables/softmax.h"
#include "lockstep/kernels/tables/unary.h"

namespace lockstep::kernels::cuda {

const BinaryKernels kBinary{.binary = &binary, .binaryScalar = &binaryScalar};

const UnaryKernels kUnary{.unary = &unary, .unaryBackward = &unaryBackward};

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

}  // namespace lockstep::kernels::cuda
