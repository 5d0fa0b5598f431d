// Sum/mean with oneDNN's reduction primitive, one per (op, input layout, reduced dims).
#include <dnnl.hpp>

#include <limits>

#include "lockstep/kernels/dnnl/context.h"
#include "lockstep/kernels/reduce.h"

namespace lockstep::kernels::onednn {

Tensor reduce(ReduceOp op, const Tensor& x0, const std::vector<int64_t>& dims, bool keepdim) {
  const char* name = op == ReduceOp::sum ? "sum" : "mean";
  std::vector<bool> mask = detail::reducedMask(dims, x0.dim(), name);
  const Shape kept = detail::reducedShape(x0.shape(), mask, /*keepdim=*/true);
  const Shape out = detail::reducedShape(x0.shape(), mask, keepdim);
  // Nothing to reduce (no dims, or only size-1 dims): oneDNN rejects src == dst shapes.
  if (kept == x0.shape()) {
    Tensor copy = Tensor::empty(x0.shape(), x0.dtype());
    copy.copyFrom(x0);
    return copy.view(out);
  }
  if (x0.numel() == 0) {
    return Tensor::full(out, op == ReduceOp::sum ? 0.0 : std::numeric_limits<double>::quiet_NaN(), x0.dtype());
  }
  Tensor x = x0.isDense() ? x0 : x0.contiguous();
  Tensor y = Tensor::empty(kept, x.dtype());
  static PrimitiveCache<dnnl::reduction> cache;
  auto xm = memDesc(x), ym = memDesc(y);
  try {
    auto& prim = cache.get(std::string(name) + keyOf(x) + shapeToString(kept), [&] {
      auto alg = op == ReduceOp::sum ? dnnl::algorithm::reduction_sum : dnnl::algorithm::reduction_mean;
      return dnnl::reduction(dnnl::reduction::primitive_desc(dnnl::reduction::desc(alg, xm, ym, 0.f, 0.f), engine()));
    });
    prim.execute(stream(), {{DNNL_ARG_SRC, memory(xm, x)}, {DNNL_ARG_DST, memory(ym, y)}});
    stream().wait();
  } catch (const dnnl::error& err) {
    rethrow(err, name);
  }
  return y.view(out);
}

}  // namespace lockstep::kernels::onednn
