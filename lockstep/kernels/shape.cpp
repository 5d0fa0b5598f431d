#include "lockstep/kernels/shape.h"

#include "lockstep/kernels/cuda/concat.h"
#include "lockstep/kernels/dispatch.h"

namespace lockstep::kernels {

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
  const Shape out = checkConcat(xs, dim, &d);
  [[maybe_unused]] const Tensor* on_gpu = &xs[0];  // any GPU operand routes (mixed devices: an error there)
  for (const Tensor& x : xs) on_gpu = x.isCuda() ? &x : on_gpu;
  LOCKSTEP_ON_CUDA(*on_gpu, cuda::concat(xs, d, out));
  return dispatch<onednn::concat, reference::concat>(xs[0].dtype(), xs, dim);
}

}  // namespace lockstep::kernels
