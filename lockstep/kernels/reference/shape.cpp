// Plain loops: the ground truth the fast kernels are tested against.
#include "lockstep/kernels/shape.h"

#include "lockstep/kernels/tables/shape.h"

namespace lockstep::kernels::reference {

Tensor concat(const std::vector<Tensor>& xs, int64_t dim) {
  int64_t d = 0;
  Shape out = checkConcat(xs, dim, &d);
  // View the result as [outer, total, inner] and copy each input's [outer, n_i, inner] block.
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < d; ++k) outer *= out[k];
  for (size_t k = static_cast<size_t>(d) + 1; k < out.size(); ++k) inner *= out[k];
  Tensor y = Tensor::empty(out, DType::f64);
  double* py = y.data<double>();
  int64_t start = 0;
  for (const Tensor& x : xs) {
    Tensor xd = x.to(DType::f64).contiguous();
    const double* px = xd.data<double>();
    const int64_t n = x.size(d);
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t i = 0; i < inner; ++i)
          py[(o * out[d] + start + j) * inner + i] = px[(o * n + j) * inner + i];
      }
    }
    start += n;
  }
  return y.to(xs[0].dtype());
}

const ShapeKernels kShape{LOCKSTEP_SHAPE_OPS(LOCKSTEP_KERNEL_ENTRY)};

}  // namespace lockstep::kernels::reference
