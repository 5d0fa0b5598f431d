#include "lockstep/kernels/linear.h"

#include <dnnl.hpp>

#include "lockstep/kernels/dnnl/context.h"
#include "lockstep/kernels/tables/linear.h"

namespace lockstep::kernels::onednn {

namespace {
using MemDesc = dnnl::memory::desc;
using Tag = dnnl::memory::format_tag;

// linear flattens x [..., in] to rows [M, in]: a view when x is contiguous (the usual case).
Tensor rows(const Tensor& t) { return t.reshape({-1, t.size(t.dim() - 1)}); }

MemDesc plain(int64_t r, int64_t c, DType t) { return MemDesc({r, c}, dataType(t), Tag::ab); }
MemDesc vec(int64_t n, DType t) { return MemDesc({n}, dataType(t), Tag::a); }

// Plain row-major descriptors everywhere: oneDNN's gemm-based inner product takes them as they are,
// so no weight reorder runs per step (a blocked "any" layout would need one each time, since the
// weights live in plain layout for the optimizer and DDP buckets).
struct IpShape {
  int64_t m, in, out;
  DType dtype;
  std::string key() const {
    return std::to_string(m) + "x" + std::to_string(in) + "x" + std::to_string(out) + dtypeName(dtype);
  }
  MemDesc src() const { return plain(m, in, dtype); }
  MemDesc wei() const { return plain(out, in, dtype); }
  MemDesc dst() const { return plain(m, out, dtype); }
  MemDesc bias() const { return vec(out, dtype); }
  // The hint the backward primitives are created against.
  dnnl::inner_product_forward::primitive_desc forwardPd(bool with_bias) const {
    auto d = with_bias
                 ? dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_training, src(), wei(), bias(),
                                                     dst())
                 : dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_training, src(), wei(), dst());
    return dnnl::inner_product_forward::primitive_desc(d, attributes(), engine());
  }
};

// oneDNN takes any plain strides except zero ones (from expand), which it would run on its slow
// reference kernels or reject: those operands are copied first.
bool describable(const Tensor& t) {
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.stride(d) == 0 && t.size(d) > 1) return false;
  }
  return true;
}

Shape withLast(const Shape& s, int64_t last) {
  Shape r = s;
  r.back() = last;
  return r;
}
}  // namespace

// Forward runs on the matmul primitive, x @ W^T with W^T described by strides (no copy): at the
// benchmark's shapes oneDNN's brgemm matmul is ~1.5x faster than its gemm-based inner product
// forward, whose W^T gemm variant is slow. The backward passes stay on inner_product (plain
// layouts, gemm:jit), which is fast there and yields the bias gradient in the same call.
Tensor linearForward(const Tensor& x0, const Tensor& w0, const Tensor& b0) {
  Tensor x = x0.dim() == 2 && describable(x0) ? x0 : rows(x0).contiguous();
  Tensor w = describable(w0) ? w0 : w0.contiguous(), b = b0.defined() ? b0.contiguous() : b0;
  const int64_t m = x.size(0), in = x.size(1), out = w.size(0);
  if (m == 0 || in == 0 || out == 0) return reference::kLinear.linearForward(x0, w0, b0);
  Tensor y = Tensor::empty({m, out}, x.dtype());
  Tensor wt = w.transpose(0, 1);
  static PrimitiveCache<dnnl::matmul> cache;
  try {
    auto mx = memDesc(x), mw = memDesc(wt), my = plain(m, out, x.dtype()), mb = plain(1, out, x.dtype());
    // Built from integers, not keyOf's stream formatting: this runs every step.
    std::string key = std::to_string(m) + "x" + std::to_string(in) + "x" + std::to_string(out) + "s" +
                      std::to_string(x.stride(0)) + "," + std::to_string(x.stride(1)) + "," +
                      std::to_string(w.stride(0)) + "," + std::to_string(w.stride(1)) + dtypeName(x.dtype()) +
                      (b.defined() ? "+b" : "");
    auto& prim = cache.get(key, [&] {
      auto d = b.defined() ? dnnl::matmul::desc(mx, mw, mb, my) : dnnl::matmul::desc(mx, mw, my);
      return dnnl::matmul(dnnl::matmul::primitive_desc(d, attributes(), engine()));
    });
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC, memory(mx, x)}, {DNNL_ARG_WEIGHTS, memory(mw, wt)}, {DNNL_ARG_DST, memory(my, y)}};
    if (b.defined()) args.emplace(DNNL_ARG_BIAS, memory(mb, b));
    execute(prim, args);
  } catch (const dnnl::error& e) {
    rethrow(e, "linear forward");
  }
  return y.view(withLast(x0.shape(), out));
}

Tensor linearBackwardData(const Tensor& gy0, const Tensor& w0) {
  Tensor gy = rows(gy0), w = w0.contiguous();
  IpShape s{gy.size(0), w.size(1), w.size(0), gy.dtype()};
  if (s.m == 0 || s.in == 0 || s.out == 0) return reference::kLinear.linearBackwardData(gy0, w0);
  Tensor gx = Tensor::empty({s.m, s.in}, gy.dtype());
  static PrimitiveCache<dnnl::inner_product_backward_data> cache;
  try {
    auto& prim = cache.get(s.key(), [&] {
      auto d = dnnl::inner_product_backward_data::desc(s.src(), s.wei(), s.dst());
      return dnnl::inner_product_backward_data(
          dnnl::inner_product_backward_data::primitive_desc(d, attributes(), engine(), s.forwardPd(false)));
    });
    execute(prim, {{DNNL_ARG_DIFF_DST, memory(s.dst(), gy)},
                   {DNNL_ARG_WEIGHTS, memory(s.wei(), w)},
                   {DNNL_ARG_DIFF_SRC, memory(s.src(), gx)}});
  } catch (const dnnl::error& e) {
    rethrow(e, "linear backward (data)");
  }
  return gx.view(withLast(gy0.shape(), s.in));
}

std::pair<Tensor, Tensor> linearBackwardWeights(const Tensor& gy0, const Tensor& x0, bool with_bias) {
  Tensor gy = rows(gy0), x = rows(x0);
  IpShape s{x.size(0), x.size(1), gy.size(1), x.dtype()};
  // Empty matrices: nothing for oneDNN to do, and the loops handle them exactly.
  if (s.m == 0 || s.in == 0 || s.out == 0)
    return reference::kLinear.linearBackwardWeights(gy0, x0, with_bias);
  Tensor gw = Tensor::empty({s.out, s.in}, x.dtype());
  Tensor gb = with_bias ? Tensor::empty({s.out}, x.dtype()) : Tensor();
  static PrimitiveCache<dnnl::inner_product_backward_weights> cache;
  try {
    auto& prim = cache.get(s.key() + (with_bias ? "b" : ""), [&] {
      auto d = with_bias ? dnnl::inner_product_backward_weights::desc(s.src(), s.wei(), s.bias(), s.dst())
                         : dnnl::inner_product_backward_weights::desc(s.src(), s.wei(), s.dst());
      return dnnl::inner_product_backward_weights(dnnl::inner_product_backward_weights::primitive_desc(
          d, attributes(), engine(), s.forwardPd(with_bias)));
    });
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, memory(s.src(), x)},
                                               {DNNL_ARG_DIFF_DST, memory(s.dst(), gy)},
                                               {DNNL_ARG_DIFF_WEIGHTS, memory(s.wei(), gw)}};
    if (with_bias) args.emplace(DNNL_ARG_DIFF_BIAS, memory(s.bias(), gb));
    execute(prim, args);
  } catch (const dnnl::error& e) {
    rethrow(e, "linear backward (weights)");
  }
  return {gw, gb};
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  // oneDNN wants equal ranks: pad the batch dims of the lower-rank operand with 1s (broadcast).
  const int64_t nd = std::max(a.dim(), b.dim());
  auto padded = [&](const Tensor& t) {
    Tensor v = t;
    while (v.dim() < nd) v = v.unsqueeze(0);
    return v;
  };
  Tensor pa = padded(a), pb = padded(b);
  Shape out_shape(nd);
  for (int64_t d = 0; d < nd - 2; ++d) out_shape[d] = std::max(pa.size(d), pb.size(d));
  out_shape[nd - 2] = pa.size(nd - 2);
  out_shape[nd - 1] = pb.size(nd - 1);
  for (int64_t d = 0; d < nd - 2; ++d) {
    if (pa.size(d) == 0 || pb.size(d) == 0) out_shape[d] = 0;
  }
  Tensor y = Tensor::empty(out_shape, a.dtype());
  if (y.numel() == 0) return y;
  if (pa.size(nd - 1) == 0) {
    y.zero();
    return y;
  }
  // Operands keep their real strides (transposed views run without a copy).
  if (!describable(pa)) pa = pa.contiguous();
  if (!describable(pb)) pb = pb.contiguous();
  static PrimitiveCache<dnnl::matmul> cache;
  try {
    auto ma = memDesc(pa), mb = memDesc(pb), my = memDesc(y);
    auto& prim = cache.get(keyOf(pa) + "@" + keyOf(pb), [&] {
      return dnnl::matmul(
          dnnl::matmul::primitive_desc(dnnl::matmul::desc(ma, mb, my), attributes(), engine()));
    });
    execute(
        prim,
        {{DNNL_ARG_SRC, memory(ma, pa)}, {DNNL_ARG_WEIGHTS, memory(mb, pb)}, {DNNL_ARG_DST, memory(my, y)}});
  } catch (const dnnl::error& e) {
    rethrow(e, "matmul");
  }
  return y;
}

const LinearKernels kLinear{LOCKSTEP_LINEAR_OPS(LOCKSTEP_KERNEL_ENTRY)};

}  // namespace lockstep::kernels::onednn
