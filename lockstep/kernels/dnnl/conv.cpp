// oneDNN convolution: forward (optionally with a fused relu post-op), backward-data and
// backward-weights (+ bias), each primitive created once per shape and cached. Activations are
// always computed channels_last (nhwc): oneDNN 2.6 has only gemm kernels for plain nchw, whose
// backward-data pass is ~18x slower (13.5 ms vs 0.75 ms for 32x32x13x13 -> 64, one thread), so an
// nchw input is reordered once and everything downstream stays nhwc. Only the weights are reordered
// per call, into the blocked layout oneDNN picks (format_tag::any): microseconds for 64x64x3x3,
// while a plain weight layout would force a much slower implementation.
#include "lockstep/kernels/conv.h"

#include <dnnl.hpp>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "lockstep/kernels/dnnl/activation_layout.h"
#include "lockstep/kernels/tables/conv.h"

namespace lockstep::kernels::onednn {

namespace {
using Mem = dnnl::memory;
using tag = Mem::format_tag;

constexpr MemoryFormat kConvFormat = MemoryFormat::channels_last;

struct Geometry {
  Mem::dims strides, dilates, pad_l, pad_r;
};

Geometry geometry(const Shape& x, const Shape& w, const Shape& y, const Conv2dParams& p) {
  Geometry g;
  for (int i = 0; i < 2; ++i) {
    const int64_t span = p.dilation[i] * (w[2 + i] - 1) + 1;
    g.strides.push_back(p.stride[i]);
    g.dilates.push_back(p.dilation[i] - 1);  // oneDNN counts the gaps, PyTorch the step
    g.pad_l.push_back(p.padding[i]);
    // Exactly what the last window needs: rows PyTorch's floor division drops are not computed.
    g.pad_r.push_back(std::max<int64_t>(0, (y[2 + i] - 1) * p.stride[i] + span - x[2 + i] - p.padding[i]));
  }
  return g;
}

Mem::dims weightDims(const Shape& w, int64_t groups) {
  if (groups == 1) return {w[0], w[1], w[2], w[3]};
  return {groups, w[0] / groups, w[1], w[2], w[3]};
}

// The caller's weights: [O, C/groups, kH, kW] row-major, i.e. oihw (goihw with groups).
Mem::desc userWeightsDesc(const Shape& w, int64_t groups, DType dt) {
  return Mem::desc(weightDims(w, groups), dataType(dt), groups == 1 ? tag::oihw : tag::goihw);
}

Mem::desc anyWeightsDesc(const Shape& w, int64_t groups, DType dt) {
  return Mem::desc(weightDims(w, groups), dataType(dt), tag::any);
}

std::string keyFor(const char* what, const Shape& x, const Shape& w, MemoryFormat fx, MemoryFormat fy,
                   DType dt, bool bias, const Conv2dParams& p) {
  std::ostringstream os;
  os << what << dtypeName(dt) << shapeToString(x) << formatKey(fx) << shapeToString(w) << formatKey(fy) << "b"
     << bias << "s" << p.stride[0] << "," << p.stride[1] << "p" << p.padding[0] << "," << p.padding[1] << "d"
     << p.dilation[0] << "," << p.dilation[1] << "g" << p.groups << "r" << p.fuse_relu;
  return os.str();
}

dnnl::convolution_forward::desc forwardDesc(const Mem::desc& x_md, const Mem::desc& w_md, bool bias,
                                            const Mem::desc& y_md, const Geometry& g, int64_t out_channels,
                                            DType dt) {
  Mem::desc b_md = bias ? vectorDesc(out_channels, dt) : Mem::desc();
  return dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                         dnnl::algorithm::convolution_direct, x_md, w_md, b_md, y_md,
                                         g.strides, g.dilates, g.pad_l, g.pad_r);
}

// A primitive plus the reorder between the caller's plain weights and the primitive's layout
// (absent when oneDNN happens to want the plain layout).
template <typename Prim>
struct WithWeights {
  Prim prim;
  Mem::desc user_w;
  Mem::desc prim_w;
  std::optional<dnnl::reorder> reorder;
};

template <typename Prim>
WithWeights<Prim> withWeights(Prim prim, const Mem::desc& user_w, const Mem::desc& prim_w, bool to_prim) {
  WithWeights<Prim> out{std::move(prim), user_w, prim_w, std::nullopt};
  if (user_w != prim_w) {
    out.reorder = to_prim ? dnnl::reorder(dnnl::reorder::primitive_desc(engine(), user_w, engine(), prim_w))
                          : dnnl::reorder(dnnl::reorder::primitive_desc(engine(), prim_w, engine(), user_w));
  }
  return out;
}

// The caller's weights in the primitive's layout; `buffer` keeps a reordered copy alive.
template <typename Prim>
Mem primitiveWeights(const WithWeights<Prim>& p, const Tensor& w, Tensor& buffer) {
  Mem user = Mem(p.user_w, engine(), w.dataPtr());
  if (!p.reorder) return user;
  buffer = Tensor::empty({static_cast<int64_t>(p.prim_w.get_size())}, DType::u8);
  Mem blocked(p.prim_w, engine(), buffer.dataPtr());
  execute(*p.reorder, {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, blocked}});
  return blocked;
}
}  // namespace

Tensor conv2dForward(const Tensor& x0, const Tensor& w0, const Tensor& b0, const Conv2dParams& p) {
  const MemoryFormat f = kConvFormat;
  Tensor x = inFormat(x0, f), w = w0.contiguous(), b = b0.defined() ? b0.contiguous() : b0;
  const Shape ys = conv2dOutputShape(x.shape(), w.shape(), p);
  Tensor y = Tensor::empty(ys, x.dtype(), f);
  if (y.numel() == 0 || x.numel() == 0) return y;
  using Prims = WithWeights<dnnl::convolution_forward>;
  static PrimitiveCache<Prims> cache;
  try {
    auto& prims = cache.get(keyFor("fwd", x.shape(), w.shape(), f, f, x.dtype(), b.defined(), p), [&] {
      const DType dt = x.dtype();
      auto fd =
          forwardDesc(activationDesc(x.shape(), dt, f), anyWeightsDesc(w.shape(), p.groups, dt), b.defined(),
                      activationDesc(ys, dt, f), geometry(x.shape(), w.shape(), ys, p), ys[1], dt);
      dnnl::primitive_attr attr;
      if (p.fuse_relu) {
        dnnl::post_ops ops;
        ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
        attr.set_post_ops(ops);
      }
      dnnl::convolution_forward::primitive_desc pd(fd, attr, engine());
      return withWeights(dnnl::convolution_forward(pd), userWeightsDesc(w.shape(), p.groups, dt),
                         pd.weights_desc(), true);
    });
    Tensor w_buffer;
    std::unordered_map<int, Mem> args{
        {DNNL_ARG_SRC, Mem(activationDesc(x.shape(), x.dtype(), f), engine(), x.dataPtr())},
        {DNNL_ARG_WEIGHTS, primitiveWeights(prims, w, w_buffer)},
        {DNNL_ARG_DST, Mem(activationDesc(ys, x.dtype(), f), engine(), y.dataPtr())}};
    if (b.defined()) args.emplace(DNNL_ARG_BIAS, Mem(vectorDesc(ys[1], b.dtype()), engine(), b.dataPtr()));
    execute(prims.prim, args);
  } catch (const dnnl::error& e) {
    rethrow(e, "conv2d forward");
  }
  return y;
}

Tensor conv2dBackwardData(const Tensor& gy0, const Tensor& x, const Tensor& w0, const Conv2dParams& p) {
  const MemoryFormat f = kConvFormat;
  Tensor gy = inFormat(gy0, f), w = w0.contiguous();
  Tensor gx = Tensor::empty(x.shape(), x.dtype(), f);
  if (gx.numel() == 0) return gx;
  if (gy.numel() == 0) {
    gx.zero();
    return gx;
  }
  using Prims = WithWeights<dnnl::convolution_backward_data>;
  static PrimitiveCache<Prims> cache;
  try {
    auto& prims = cache.get(keyFor("bwd_data", x.shape(), w.shape(), f, f, x.dtype(), false, p), [&] {
      const DType dt = x.dtype();
      auto x_md = activationDesc(x.shape(), dt, f), y_md = activationDesc(gy.shape(), dt, f);
      auto w_md = anyWeightsDesc(w.shape(), p.groups, dt);
      Geometry g = geometry(x.shape(), w.shape(), gy.shape(), p);
      dnnl::convolution_forward::primitive_desc hint(forwardDesc(x_md, w_md, false, y_md, g, gy.size(1), dt),
                                                     engine());
      dnnl::convolution_backward_data::desc bd(dnnl::algorithm::convolution_direct, x_md, w_md, y_md,
                                               g.strides, g.dilates, g.pad_l, g.pad_r);
      dnnl::convolution_backward_data::primitive_desc pd(bd, engine(), hint);
      return withWeights(dnnl::convolution_backward_data(pd), userWeightsDesc(w.shape(), p.groups, dt),
                         pd.weights_desc(), true);
    });
    Tensor w_buffer;
    execute(prims.prim,
            {{DNNL_ARG_DIFF_DST, Mem(activationDesc(gy.shape(), gy.dtype(), f), engine(), gy.dataPtr())},
             {DNNL_ARG_WEIGHTS, primitiveWeights(prims, w, w_buffer)},
             {DNNL_ARG_DIFF_SRC, Mem(activationDesc(x.shape(), x.dtype(), f), engine(), gx.dataPtr())}});
  } catch (const dnnl::error& e) {
    rethrow(e, "conv2d backward (data)");
  }
  return gx;
}

Tensor conv2dInput(const Tensor& x) { return inFormat(x, kConvFormat); }
// oneDNN's primitives reorder the weight into their own blocked format.
Tensor conv2dWeight(const Tensor& weight, const Tensor&) { return weight; }

Conv2dWeightGrads conv2dBackwardWeights(const Tensor& gy0, const Tensor& x0, const Shape& ws, bool with_bias,
                                        const Conv2dParams& p) {
  const MemoryFormat f = kConvFormat;
  Tensor x = inFormat(x0, f), gy = inFormat(gy0, f);
  Conv2dWeightGrads out{Tensor::empty(ws, x.dtype()),
                        with_bias ? Tensor::empty({ws[0]}, x.dtype()) : Tensor()};
  if (x.numel() == 0 || gy.numel() == 0) {
    out.weight.zero();
    if (with_bias) out.bias.zero();
    return out;
  }
  using Prims = WithWeights<dnnl::convolution_backward_weights>;
  static PrimitiveCache<Prims> cache;
  try {
    auto& prims = cache.get(keyFor("bwd_weights", x.shape(), ws, f, f, x.dtype(), with_bias, p), [&] {
      const DType dt = x.dtype();
      auto x_md = activationDesc(x.shape(), dt, f), y_md = activationDesc(gy.shape(), dt, f);
      auto w_md = anyWeightsDesc(ws, p.groups, dt);
      Mem::desc b_md = with_bias ? vectorDesc(ws[0], dt) : Mem::desc();
      Geometry g = geometry(x.shape(), ws, gy.shape(), p);
      dnnl::convolution_forward::primitive_desc hint(forwardDesc(x_md, w_md, with_bias, y_md, g, ws[0], dt),
                                                     engine());
      dnnl::convolution_backward_weights::desc bd(dnnl::algorithm::convolution_direct, x_md, w_md, b_md, y_md,
                                                  g.strides, g.dilates, g.pad_l, g.pad_r);
      dnnl::convolution_backward_weights::primitive_desc pd(bd, engine(), hint);
      return withWeights(dnnl::convolution_backward_weights(pd), userWeightsDesc(ws, p.groups, dt),
                         pd.diff_weights_desc(), false);
    });
    Mem user_gw(prims.user_w, engine(), out.weight.dataPtr());
    Tensor gw_buffer;
    Mem prim_gw = user_gw;
    if (prims.reorder) {
      gw_buffer = Tensor::empty({static_cast<int64_t>(prims.prim_w.get_size())}, DType::u8);
      prim_gw = Mem(prims.prim_w, engine(), gw_buffer.dataPtr());
    }
    std::unordered_map<int, Mem> args{
        {DNNL_ARG_SRC, Mem(activationDesc(x.shape(), x.dtype(), f), engine(), x.dataPtr())},
        {DNNL_ARG_DIFF_DST, Mem(activationDesc(gy.shape(), gy.dtype(), f), engine(), gy.dataPtr())},
        {DNNL_ARG_DIFF_WEIGHTS, prim_gw}};
    if (with_bias)
      args.emplace(DNNL_ARG_DIFF_BIAS, Mem(vectorDesc(ws[0], x.dtype()), engine(), out.bias.dataPtr()));
    execute(prims.prim, args);
    if (prims.reorder) execute(*prims.reorder, {{DNNL_ARG_FROM, prim_gw}, {DNNL_ARG_TO, user_gw}});
  } catch (const dnnl::error& e) {
    rethrow(e, "conv2d backward (weights)");
  }
  return out;
}

const ConvKernels kConv{LOCKSTEP_CONV_OPS(LOCKSTEP_KERNEL_ENTRY)};

}  // namespace lockstep::kernels::onednn
