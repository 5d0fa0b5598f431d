#include "lockstep/kernels/shape.h"

#include <algorithm>

#include "lockstep/kernels/dispatch.h"
#include "lockstep/kernels/tables/shape.h"

namespace lockstep::kernels {

namespace {
const Backends<ShapeKernels> kBackends{
    .onednn = &onednn::kShape, .reference = &reference::kShape, .cuda = LOCKSTEP_CUDA_TABLE(cuda::kShape)};
}  // namespace

Shape checkConcat(const std::vector<Tensor>& xs, int64_t dim, int64_t* d) {
  LOCKSTEP_ENFORCE(!xs.empty(), ValueError, "concat: needs at least one tensor");
  const Tensor& first = xs[0];
  LOCKSTEP_ENFORCE(first.defined(), ValueError, "concat: tensor 0 is undefined");
  LOCKSTEP_ENFORCE(first.dim() > 0, ValueError, "concat: cannot concatenate 0-d tensors");
  *d = normalizeDim(dim, first.dim(), "concat: dim");
  Shape out = first.shape();
  out[*d] = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    LOCKSTEP_ENFORCE(x.defined(), ValueError, "concat: tensor ", i, " is undefined");
    LOCKSTEP_ENFORCE(x.dtype() == first.dtype(), ValueError, "concat: tensor ", i, " has dtype ",
                     dtypeName(x.dtype()), " but tensor 0 has dtype ", dtypeName(first.dtype()));
    bool ok = x.dim() == first.dim();
    for (int64_t k = 0; ok && k < x.dim(); ++k) ok = k == *d || x.size(k) == first.size(k);
    LOCKSTEP_ENFORCE(ok, ValueError, "concat: along dim ", dim, ", tensor ", i, " of shape ",
                     shapeToString(x.shape()), " does not match tensor 0 of shape ",
                     shapeToString(first.shape()));
    out[*d] += x.size(*d);
  }
  return out;
}

Tensor concat(const std::vector<Tensor>& xs, int64_t dim) {
  int64_t d = 0;
  checkConcat(xs, dim, &d);
  // Any GPU operand routes to the GPU (mixed devices: an error there).
  const bool on_gpu = std::any_of(xs.begin(), xs.end(), [](const Tensor& x) { return x.isCuda(); });
  return dispatch<&ShapeKernels::concat>(kBackends, {on_gpu, xs[0].dtype()}, xs, d);
}

}  // namespace lockstep::kernels
