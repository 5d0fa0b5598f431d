#include "lockstep/kernels/softmax.h"

#include <dnnl.hpp>

#include "lockstep/kernels/dnnl/context.h"
#include "lockstep/kernels/tables/softmax.h"

namespace lockstep::kernels::onednn {

namespace {
// oneDNN takes any plain strided layout: describe the tensor as it is rather than copying it.

template <typename Fwd>
Tensor forward(const Tensor& x0, int64_t dim0, const char* op) {
  const int64_t dim = normalizeDim(dim0, x0.dim(), op);
  Tensor x = dense(x0);
  Tensor y = Tensor::emptyLike(x);
  if (x.numel() == 0) return y;
  static PrimitiveCache<Fwd> cache;
  auto md = memDesc(x);
  try {
    auto& prim = cache.get(keyOf(x) + "/" + std::to_string(dim), [&] {
      typename Fwd::desc d(dnnl::prop_kind::forward_training, md, static_cast<int>(dim));
      return Fwd(typename Fwd::primitive_desc(d, attributes(), engine()));
    });
    execute(prim, {{DNNL_ARG_SRC, memory(md, x)}, {DNNL_ARG_DST, memory(md, y)}});
  } catch (const dnnl::error& e) {
    rethrow(e, op);
  }
  return y;
}

template <typename Fwd, typename Bwd>
Tensor backward(const Tensor& gy0, const Tensor& y0, int64_t dim0, const char* op) {
  const int64_t dim = normalizeDim(dim0, y0.dim(), op);
  Tensor y = dense(y0);
  // diff_dst and dst share one descriptor: gy takes y's layout.
  Tensor gy = laidOutLike(gy0, y);
  Tensor gx = Tensor::emptyLike(y);
  if (y.numel() == 0) return gx;
  static PrimitiveCache<Bwd> cache;
  auto md = memDesc(y);
  try {
    auto& prim = cache.get(keyOf(y) + "/" + std::to_string(dim), [&] {
      typename Fwd::desc fd(dnnl::prop_kind::forward_training, md, static_cast<int>(dim));
      typename Fwd::primitive_desc fpd(fd, engine());
      typename Bwd::desc bd(md, md, static_cast<int>(dim));
      return Bwd(typename Bwd::primitive_desc(bd, attributes(), engine(), fpd));
    });
    execute(prim, {{DNNL_ARG_DST, memory(md, y)},
                   {DNNL_ARG_DIFF_DST, memory(md, gy)},
                   {DNNL_ARG_DIFF_SRC, memory(md, gx)}});
  } catch (const dnnl::error& e) {
    rethrow(e, op);
  }
  return gx;
}
}  // namespace

Tensor softmaxForward(const Tensor& x, int64_t dim) {
  return forward<dnnl::softmax_forward>(x, dim, "softmax forward");
}
Tensor softmaxBackward(const Tensor& gy, const Tensor& y, int64_t dim) {
  return backward<dnnl::softmax_forward, dnnl::softmax_backward>(gy, y, dim, "softmax backward");
}
Tensor logSoftmaxForward(const Tensor& x, int64_t dim) {
  return forward<dnnl::logsoftmax_forward>(x, dim, "log_softmax forward");
}
Tensor logSoftmaxBackward(const Tensor& gy, const Tensor& y, int64_t dim) {
  return backward<dnnl::logsoftmax_forward, dnnl::logsoftmax_backward>(gy, y, dim, "log_softmax backward");
}

const SoftmaxKernels kSoftmax{LOCKSTEP_SOFTMAX_OPS(LOCKSTEP_KERNEL_ENTRY)};

}  // namespace lockstep::kernels::onednn
