#include <dnnl.hpp>

#include "lockstep/kernels/activation.h"
#include "lockstep/kernels/dnnl/context.h"

namespace lockstep::kernels::onednn {

namespace {
// Element-wise ops run over a dense tensor as a flat 1-d buffer: layout does not matter.
Tensor dense(const Tensor& t) { return t.isDense() ? t : t.contiguous(); }
dnnl::memory::desc flatDesc(const Tensor& t) {
  return dnnl::memory::desc({std::max<int64_t>(t.numel(), 1)}, dataType(t.dtype()), dnnl::memory::format_tag::a);
}
}  // namespace

Tensor reluForward(const Tensor& x0) {
  Tensor x = dense(x0);
  Tensor y = Tensor::emptyLike(x);
  if (x.numel() == 0) return y;
  static PrimitiveCache<dnnl::eltwise_forward> cache;
  auto md = flatDesc(x);
  try {
    auto& prim = cache.get(std::to_string(x.numel()) + dtypeName(x.dtype()), [&] {
      auto d = dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::eltwise_relu, md, 0.f);
      return dnnl::eltwise_forward(dnnl::eltwise_forward::primitive_desc(d, engine()));
    });
    prim.execute(stream(), {{DNNL_ARG_SRC, memory(md, x)}, {DNNL_ARG_DST, memory(md, y)}});
  } catch (const dnnl::error& e) {
    rethrow(e, "relu forward");
  }
  return y;
}

Tensor reluBackward(const Tensor& gy0, const Tensor& y0) {
  Tensor y = dense(y0);
  Tensor gy = gy0.strides() == y.strides() ? gy0 : [&] {
    Tensor t = Tensor::emptyLike(y);
    t.copyFrom(gy0);
    return t;
  }();
  Tensor gx = Tensor::emptyLike(y);
  if (y.numel() == 0) return gx;
  struct Prims {
    dnnl::eltwise_backward bwd;
  };
  static PrimitiveCache<Prims> cache;
  auto md = flatDesc(y);
  try {
    auto& p = cache.get(std::to_string(y.numel()) + dtypeName(y.dtype()), [&] {
      auto fd = dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training,
                                            dnnl::algorithm::eltwise_relu_use_dst_for_bwd, md, 0.f);
      auto fpd = dnnl::eltwise_forward::primitive_desc(fd, engine());
      auto bd = dnnl::eltwise_backward::desc(dnnl::algorithm::eltwise_relu_use_dst_for_bwd, md, md, 0.f);
      return Prims{dnnl::eltwise_backward(dnnl::eltwise_backward::primitive_desc(bd, engine(), fpd))};
    });
    p.bwd.execute(stream(), {{DNNL_ARG_DST, memory(md, y)},
                             {DNNL_ARG_DIFF_DST, memory(md, gy)},
                             {DNNL_ARG_DIFF_SRC, memory(md, gx)}});
  } catch (const dnnl::error& e) {
    rethrow(e, "relu backward");
  }
  return gx;
}

}  // namespace lockstep::kernels::onednn
