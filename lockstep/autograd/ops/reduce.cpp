// sum and mean of ops/reduce.h. Backward broadcasts the (scaled) output gradient over the reduced dims.
#include "lockstep/autograd/ops/reduce.h"

#include "lockstep/autograd/autocast.h"
#include "lockstep/autograd/function.h"
#include "lockstep/kernels/binary.h"
#include "lockstep/kernels/reduce.h"

namespace lockstep::autograd {

namespace {

class ReduceBackward final : public Node {
 public:
  ReduceBackward(bool mean, Shape input, Shape kept, double scale)
      : mean_(mean), input_(std::move(input)), kept_(std::move(kept)), scale_(scale) {}
  std::vector<Tensor> apply(const Tensor& g) override {
    // A scalar gradient on the host is filled directly; on a GPU it stays there (no host sync).
    if (g.numel() == 1 && !g.isCuda()) return {Tensor::full(input_, g.itemDouble() * scale_, g.dtype())};
    // Scale the small gradient before broadcasting it, then materialise the broadcast: consumers
    // of gradients may assume they own dense memory (no stride-0 aliasing).
    Tensor gs = scale_ == 1.0 ? g : kernels::binaryScalar(kernels::BinaryOp::mul, g, scale_);
    Tensor gx = Tensor::empty(input_, g.dtype(), MemoryFormat::contiguous, g.device());
    gx.copyFrom(gs.reshape(kept_).expand(input_));
    return {gx};
  }
  std::string name() const override { return mean_ ? "MeanBackward" : "SumBackward"; }

 private:
  bool mean_;
  Shape input_, kept_;
  double scale_;
};

Variable reduceOp(bool mean, const Variable& x0, const std::vector<int64_t>& dims, bool keepdim) {
  const Variable x = autocast::fp32(x0);
  const auto op = mean ? kernels::ReduceOp::mean : kernels::ReduceOp::sum;
  Tensor y = kernels::reduce(op, x.tensor(), dims, keepdim);
  if (!needsGrad({&x})) return Variable::makeResult(y, nullptr);
  auto mask = kernels::reducedMask(dims, x.dim(), mean ? "mean" : "sum");
  Shape kept = kernels::reducedShape(x.shape(), mask, /*keepdim=*/true);
  const int64_t kept_n = shapeNumel(kept);
  const int64_t count = kept_n == 0 ? 0 : x.numel() / kept_n;
  const double scale = mean && count > 0 ? 1.0 / static_cast<double>(count) : 1.0;
  return record<ReduceBackward>(y, {&x}, mean, x.shape(), kept, scale);
}

}  // namespace

Variable sum(const Variable& x) { return reduceOp(false, x, kernels::allDims(x.tensor()), false); }
Variable sum(const Variable& x, const std::vector<int64_t>& dims, bool keepdim) {
  return reduceOp(false, x, dims, keepdim);
}
Variable mean(const Variable& x) { return reduceOp(true, x, kernels::allDims(x.tensor()), false); }
Variable mean(const Variable& x, const std::vector<int64_t>& dims, bool keepdim) {
  return reduceOp(true, x, dims, keepdim);
}

}  // namespace lockstep::autograd
