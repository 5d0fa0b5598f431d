// Element-wise math with oneDNN's eltwise primitives. Dense tensors are treated as flat buffers,
// so any dense layout works without a reorder. Primitives are cached per (op, size, exponent).
#include "lockstep/kernels/unary.h"

#include <dnnl.hpp>

#include "lockstep/kernels/dnnl/context.h"
#include "lockstep/kernels/tables/unary.h"

namespace lockstep::kernels::onednn {

namespace {

struct Eltwise {
  dnnl::algorithm alg;
  float alpha, beta;
};

Eltwise eltwiseOf(UnaryOp op, double p) {
  switch (op) {
    case UnaryOp::neg:
      return {dnnl::algorithm::eltwise_linear, -1.f, 0.f};
    case UnaryOp::exp:
      return {dnnl::algorithm::eltwise_exp_use_dst_for_bwd, 0.f, 0.f};
    case UnaryOp::log:
      return {dnnl::algorithm::eltwise_log, 0.f, 0.f};
    case UnaryOp::sqrt:
      return {dnnl::algorithm::eltwise_sqrt_use_dst_for_bwd, 0.f, 0.f};
    case UnaryOp::pow:
      return {dnnl::algorithm::eltwise_pow, 1.f, static_cast<float>(p)};
  }
  return {dnnl::algorithm::eltwise_linear, 1.f, 0.f};
}

std::string keyFor(UnaryOp op, const Tensor& t, double p) {
  std::string k = std::string(unaryOpName(op)) + dtypeName(t.dtype()) + std::to_string(t.numel());
  if (op == UnaryOp::pow) k += "^" + std::to_string(p);
  return k;
}

}  // namespace

Tensor unary(UnaryOp op, const Tensor& x0, double p) {
  Tensor x = dense(x0);
  Tensor y = Tensor::emptyLike(x);
  if (x.numel() == 0) return y;
  static PrimitiveCache<dnnl::eltwise_forward> cache;
  auto md = flatDesc(x);
  Eltwise e = eltwiseOf(op, p);
  try {
    auto& prim = cache.get(keyFor(op, x, p), [&] {
      auto d = dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, e.alg, md, e.alpha, e.beta);
      return dnnl::eltwise_forward(dnnl::eltwise_forward::primitive_desc(d, attributes(), engine()));
    });
    execute(prim, {{DNNL_ARG_SRC, memory(md, x)}, {DNNL_ARG_DST, memory(md, y)}});
    stream().wait();
  } catch (const dnnl::error& err) {
    rethrow(err, unaryOpName(op));
  }
  return y;
}

Tensor unaryBackward(UnaryOp op, const Tensor& gy0, const Tensor& saved0, double p) {
  Tensor saved = dense(saved0);
  // Both operands are read as flat buffers, so the gradient must share the saved tensor's layout.
  Tensor gy = laidOutLike(gy0, saved);
  Tensor gx = Tensor::emptyLike(saved);
  if (saved.numel() == 0) return gx;
  static PrimitiveCache<dnnl::eltwise_backward> cache;
  auto md = flatDesc(saved);
  Eltwise e = eltwiseOf(op, p);
  try {
    auto& prim = cache.get(keyFor(op, saved, p), [&] {
      auto fd = dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, e.alg, md, e.alpha, e.beta);
      auto fpd = dnnl::eltwise_forward::primitive_desc(fd, attributes(), engine());
      auto bd = dnnl::eltwise_backward::desc(e.alg, md, md, e.alpha, e.beta);
      return dnnl::eltwise_backward(dnnl::eltwise_backward::primitive_desc(bd, attributes(), engine(), fpd));
    });
    const int saved_arg = unaryBackwardUsesOutput(op) ? DNNL_ARG_DST : DNNL_ARG_SRC;
    execute(prim, {{saved_arg, memory(md, saved)},
                   {DNNL_ARG_DIFF_DST, memory(md, gy)},
                   {DNNL_ARG_DIFF_SRC, memory(md, gx)}});
    stream().wait();
  } catch (const dnnl::error& err) {
    rethrow(err, unaryOpName(op));
  }
  return gx;
}

const UnaryKernels kUnary{LOCKSTEP_UNARY_OPS(LOCKSTEP_KERNEL_ENTRY)};

}  // namespace lockstep::kernels::onednn
