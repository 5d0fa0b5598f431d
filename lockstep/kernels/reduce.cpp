#include "lockstep/kernels/reduce.h"

#include "lockstep/kernels/dispatch.h"
#include "lockstep/kernels/tables/reduce.h"

namespace lockstep::kernels {

namespace {
const Backends<ReduceKernels> kBackends{
    .onednn = &onednn::kReduce, .reference = &reference::kReduce, .cuda = LOCKSTEP_CUDA_TABLE(cuda::kReduce)};
}  // namespace

std::vector<bool> reducedMask(const std::vector<int64_t>& dims, int64_t ndim, const char* op) {
  std::vector<bool> mask(static_cast<size_t>(ndim), false);
  for (int64_t d : dims) {
    // A 0-d tensor accepts dim 0 / -1 (as in PyTorch) and has nothing to mark.
    int64_t n = normalizeDim(d, ndim, op);
    if (ndim == 0) continue;
    LOCKSTEP_ENFORCE(!mask[n], ValueError, op, ": dim ", d, " appears more than once in the dims list");
    mask[n] = true;
  }
  return mask;
}

Shape reducedShape(const Shape& shape, const std::vector<bool>& mask, bool keepdim) {
  Shape out;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (!mask[i]) {
      out.push_back(shape[i]);
    } else if (keepdim) {
      out.push_back(1);
    }
  }
  return out;
}

Tensor reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  LOCKSTEP_ENFORCE(x.defined(), ValueError, op == ReduceOp::sum ? "sum" : "mean", ": undefined operand");
  return dispatch<&ReduceKernels::reduce>(kBackends, x, op, x, dims, keepdim);
}

std::vector<int64_t> allDims(const Tensor& x) {
  std::vector<int64_t> d(static_cast<size_t>(x.dim()));
  for (int64_t i = 0; i < x.dim(); ++i) d[i] = i;
  return d;
}

Tensor sumToShape(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  LOCKSTEP_ENFORCE(shape.size() <= g.shape().size(), ValueError,
                   "sumToShape: cannot reduce a gradient of shape ", shapeToString(g.shape()),
                   " to the larger-rank shape ", shapeToString(shape));
  const size_t lead = g.shape().size() - shape.size();
  std::vector<int64_t> dims;
  for (size_t i = 0; i < g.shape().size(); ++i) {
    if (i < lead) {
      dims.push_back(static_cast<int64_t>(i));
      continue;
    }
    int64_t want = shape[i - lead], have = g.shape()[i];
    LOCKSTEP_ENFORCE(want == have || want == 1, ValueError, "sumToShape: shape ", shapeToString(shape),
                     " does not broadcast to the gradient's shape ", shapeToString(g.shape()));
    if (want == 1 && have != 1) dims.push_back(static_cast<int64_t>(i));
  }
  return reduce(ReduceOp::sum, g, dims, /*keepdim=*/true).view(shape);
}

}  // namespace lockstep::kernels
