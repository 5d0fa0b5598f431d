// oneDNN convolution: forward (optionally with the relu after it), backward-data and
// backward-weights (+ bias), each primitive created once per shape and cached. Activations are
// always channels_last (nhwc) for the caller: oneDNN 2.6 has only gemm kernels for plain nchw, whose
// backward-data pass is ~18x slower (13.5 ms vs 0.75 ms for 32x32x13x13 -> 64, one thread), so an
// nchw input is reordered once and everything downstream stays nhwc. The weights are reordered
// per call into the blocked layout oneDNN picks (format_tag::any): microseconds for 64x64x3x3,
// while a plain weight layout would force a much slower implementation. Where Winograd's kernels
// pay (winogradWanted), the activations are reordered per call too, into and out of the
// channel-blocked layout those kernels take: the reorders cost less than the kernels save.
#include "lockstep/kernels/conv.h"

#include <atomic>
#include <dnnl.hpp>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "lockstep/kernels/dnnl/activation_layout.h"
#include "lockstep/kernels/tables/activation.h"
#include "lockstep/kernels/tables/conv.h"
#include "lockstep/util/env.h"

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

// Winograd's F(4x4, 3x3) (oneDNN's jit_wino_4x3, CPUs with AVX-512) computes a 3x3 stride-1 f32
// convolution with 2.25x fewer multiplications than the direct kernels, forward and both backward
// passes. It pays once there are enough 4x4 output tiles for its batched GEMMs and enough channels
// for its transforms; below that it is slower. Measured on an AMD EPYC (Zen 5), one thread, each
// pass with its reorders: ResNet-18's 3x3 convolutions at batch 32 are 1.35-1.85x faster (64
// channels at 32x32: 28.4 -> 17.6 ms for the three passes), ResNet-50's at 7x7 and 14x14 2.0-2.2x;
// 16 tiles or 16 channels are 1.2-3x slower (512 channels at 4x4 with batch 1: 3.8 -> 11.6 ms).
// The rule is a function of the shape alone (never a timing), so every run takes the same kernels
// and stays bitwise repeatable.
bool winogradWanted(const Shape& w, const Shape& y, DType dt, const Conv2dParams& p) {
  if (!cpuConvWinograd() || dt != DType::f32 || p.groups != 1 || w[2] != 3 || w[3] != 3) return false;
  if (p.stride != std::array<int64_t, 2>{1, 1} || p.dilation != std::array<int64_t, 2>{1, 1}) return false;
  const int64_t rows = (y[2] + 3) / 4, cols = (y[3] + 3) / 4;
  // The share of the tiles' outputs that are the convolution's: a 3x3 or 9x9 output fills 9/16 of
  // its tiles, and computing the rest makes Winograd slower than direct there (1.9x for the seed
  // CNN's conv3 at batch 32); 7x7 (49/64) and 10x10 (100/144) still gain.
  const double filled = static_cast<double>(y[2] * y[3]) / static_cast<double>(16 * rows * cols);
  return w[0] >= 32 && w[1] >= 32 && y[0] * rows * cols >= 32 && filled >= 0.6;
}

std::atomic<bool>& winogradSwitch() {
  static std::atomic<bool> on{env::getBool("LOCKSTEP_CONV_WINOGRAD", true)};
  return on;
}

// An activation descriptor that lets the primitive choose the layout (Winograd's kernels take
// oneDNN's channel-blocked one).
Mem::desc anyActivationDesc(const Shape& s, DType dt) {
  return Mem::desc(Mem::dims(s.begin(), s.end()), dataType(dt), tag::any);
}

// A primitive descriptor from make(algorithm, x_md, y_md): Winograd's with layouts of its choice
// when `winograd` and oneDNN has kernels for the problem on this CPU, else the direct kernels in
// channels_last.
template <typename Make>
auto chooseAlgorithm(bool winograd, const Shape& x, const Shape& y, DType dt, const Make& make) {
  if (winograd) {
    try {
      return make(dnnl::algorithm::convolution_winograd, anyActivationDesc(x, dt), anyActivationDesc(y, dt));
    } catch (const dnnl::error&) {  // none for this CPU, shape or attribute: the direct kernels
    }
  }
  return make(dnnl::algorithm::convolution_direct, activationDesc(x, dt, kConvFormat),
              activationDesc(y, dt, kConvFormat));
}

std::string keyFor(const char* what, const Shape& x, const Shape& w, MemoryFormat fx, MemoryFormat fy,
                   DType dt, bool bias, const Conv2dParams& p) {
  std::ostringstream os;
  os << what << dtypeName(dt) << shapeToString(x) << formatKey(fx) << shapeToString(w) << formatKey(fy) << "b"
     << bias << "s" << p.stride[0] << "," << p.stride[1] << "p" << p.padding[0] << "," << p.padding[1] << "d"
     << p.dilation[0] << "," << p.dilation[1] << "g" << p.groups << "r" << p.fuse_relu << "w"
     << cpuConvWinograd();
  return os.str();
}

dnnl::convolution_forward::desc forwardDesc(dnnl::algorithm algo, const Mem::desc& x_md,
                                            const Mem::desc& w_md, bool bias, const Mem::desc& y_md,
                                            const Geometry& g, int64_t out_channels, DType dt) {
  Mem::desc b_md = bias ? vectorDesc(out_channels, dt) : Mem::desc();
  return dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, x_md, w_md, b_md, y_md,
                                         g.strides, g.dilates, g.pad_l, g.pad_r);
}

// One operand of a primitive: the caller's layout, the primitive's, and the reorder between them
// when they differ (user -> primitive for an input, primitive -> user for an output).
struct Operand {
  Mem::desc user, prim;
  std::optional<dnnl::reorder> reorder;

  static Operand input(const Mem::desc& user, const Mem::desc& prim) {
    return {user, prim, between(user, prim)};
  }
  static Operand output(const Mem::desc& user, const Mem::desc& prim) {
    return {user, prim, between(prim, user)};
  }

  // The caller's data at `data` as the primitive reads it: that memory, or a reordered copy that
  // `buffer` keeps alive.
  Mem read(void* data, Tensor& buffer) const {
    Mem user_mem(user, engine(), data);
    if (!reorder) return user_mem;
    Mem staged = stage(buffer);
    execute(*reorder, {{DNNL_ARG_FROM, user_mem}, {DNNL_ARG_TO, staged}});
    return staged;
  }
  // Where the primitive writes the caller's `data`: that memory, or a staging buffer that
  // finish() then copies to it.
  Mem target(void* data, Tensor& buffer) const { return reorder ? stage(buffer) : Mem(user, engine(), data); }
  void finish(const Mem& written, void* data) const {
    if (reorder) execute(*reorder, {{DNNL_ARG_FROM, written}, {DNNL_ARG_TO, Mem(user, engine(), data)}});
  }

 private:
  static std::optional<dnnl::reorder> between(const Mem::desc& from, const Mem::desc& to) {
    if (from == to) return std::nullopt;
    return dnnl::reorder(dnnl::reorder::primitive_desc(engine(), from, engine(), to, attributes()));
  }
  Mem stage(Tensor& buffer) const {
    buffer = Tensor::empty({static_cast<int64_t>(prim.get_size())}, DType::u8);
    return Mem(prim, engine(), buffer.dataPtr());
  }
};

// A convolution primitive and its three operands in the order of its arguments: forward (x,
// weights -> y), backward data (dy, weights -> dx), backward weights (x, dy -> dweights).
template <typename Prim>
struct Staged {
  Prim prim;
  Operand a, b, out;
};
}  // namespace

Tensor conv2dForward(const Tensor& x0, const Tensor& w0, const Tensor& b0, const Conv2dParams& p) {
  const MemoryFormat f = kConvFormat;
  Tensor x = inFormat(x0, f), w = w0.contiguous(), b = b0.defined() ? b0.contiguous() : b0;
  const Shape ys = conv2dOutputShape(x.shape(), w.shape(), p);
  Tensor y = Tensor::empty(ys, x.dtype(), f);
  if (y.numel() == 0 || x.numel() == 0) return y;
  using Prims = Staged<dnnl::convolution_forward>;
  static PrimitiveCache<Prims> cache;
  try {
    auto& prims = cache.get(keyFor("fwd", x.shape(), w.shape(), f, f, x.dtype(), b.defined(), p), [&] {
      const DType dt = x.dtype();
      const Geometry g = geometry(x.shape(), w.shape(), ys, p);
      const dnnl::primitive_attr attr = attributes();
      auto pd = chooseAlgorithm(winogradWanted(w.shape(), ys, dt, p), x.shape(), ys, dt,
                                [&](dnnl::algorithm algo, const Mem::desc& x_md, const Mem::desc& y_md) {
                                  return dnnl::convolution_forward::primitive_desc(
                                      forwardDesc(algo, x_md, anyWeightsDesc(w.shape(), p.groups, dt),
                                                  b.defined(), y_md, g, ys[1], dt),
                                      attr, engine());
                                });
      return Prims{dnnl::convolution_forward(pd),
                   Operand::input(activationDesc(x.shape(), dt, f), pd.src_desc()),
                   Operand::input(userWeightsDesc(w.shape(), p.groups, dt), pd.weights_desc()),
                   Operand::output(activationDesc(ys, dt, f), pd.dst_desc())};
    });
    Tensor x_buffer, w_buffer, y_buffer;
    const Mem out = prims.out.target(y.dataPtr(), y_buffer);
    std::unordered_map<int, Mem> args{{DNNL_ARG_SRC, prims.a.read(x.dataPtr(), x_buffer)},
                                      {DNNL_ARG_WEIGHTS, prims.b.read(w.dataPtr(), w_buffer)},
                                      {DNNL_ARG_DST, out}};
    if (b.defined()) args.emplace(DNNL_ARG_BIAS, Mem(vectorDesc(ys[1], b.dtype()), engine(), b.dataPtr()));
    execute(prims.prim, args);
    prims.out.finish(out, y.dataPtr());
  } catch (const dnnl::error& e) {
    rethrow(e, "conv2d forward");
  }
  // The relu in its own pass: oneDNN's relu post-op, a max against 0, turns a NaN into 0 (a network
  // whose weights went NaN reported a finite loss); torch.relu keeps it.
  if (p.fuse_relu) cpu::reluInPlace(y);
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
  using Prims = Staged<dnnl::convolution_backward_data>;
  static PrimitiveCache<Prims> cache;
  try {
    auto& prims = cache.get(keyFor("bwd_data", x.shape(), w.shape(), f, f, x.dtype(), false, p), [&] {
      const DType dt = x.dtype();
      const Geometry g = geometry(x.shape(), w.shape(), gy.shape(), p);
      auto w_md = anyWeightsDesc(w.shape(), p.groups, dt);
      auto pd = chooseAlgorithm(
          winogradWanted(w.shape(), gy.shape(), dt, p), x.shape(), gy.shape(), dt,
          [&](dnnl::algorithm algo, const Mem::desc& x_md, const Mem::desc& y_md) {
            dnnl::convolution_forward::primitive_desc hint(
                forwardDesc(algo, x_md, w_md, false, y_md, g, gy.size(1), dt), engine());
            dnnl::convolution_backward_data::desc bd(algo, x_md, w_md, y_md, g.strides, g.dilates, g.pad_l,
                                                     g.pad_r);
            return dnnl::convolution_backward_data::primitive_desc(bd, attributes(), engine(), hint);
          });
      return Prims{dnnl::convolution_backward_data(pd),
                   Operand::input(activationDesc(gy.shape(), dt, f), pd.diff_dst_desc()),
                   Operand::input(userWeightsDesc(w.shape(), p.groups, dt), pd.weights_desc()),
                   Operand::output(activationDesc(x.shape(), dt, f), pd.diff_src_desc())};
    });
    Tensor gy_buffer, w_buffer, gx_buffer;
    const Mem out = prims.out.target(gx.dataPtr(), gx_buffer);
    execute(prims.prim, {{DNNL_ARG_DIFF_DST, prims.a.read(gy.dataPtr(), gy_buffer)},
                         {DNNL_ARG_WEIGHTS, prims.b.read(w.dataPtr(), w_buffer)},
                         {DNNL_ARG_DIFF_SRC, out}});
    prims.out.finish(out, gx.dataPtr());
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
  using Prims = Staged<dnnl::convolution_backward_weights>;
  static PrimitiveCache<Prims> cache;
  try {
    auto& prims = cache.get(keyFor("bwd_weights", x.shape(), ws, f, f, x.dtype(), with_bias, p), [&] {
      const DType dt = x.dtype();
      auto w_md = anyWeightsDesc(ws, p.groups, dt);
      Mem::desc b_md = with_bias ? vectorDesc(ws[0], dt) : Mem::desc();
      const Geometry g = geometry(x.shape(), ws, gy.shape(), p);
      auto pd = chooseAlgorithm(winogradWanted(ws, gy.shape(), dt, p), x.shape(), gy.shape(), dt,
                                [&](dnnl::algorithm algo, const Mem::desc& x_md, const Mem::desc& y_md) {
                                  dnnl::convolution_forward::primitive_desc hint(
                                      forwardDesc(algo, x_md, w_md, with_bias, y_md, g, ws[0], dt), engine());
                                  dnnl::convolution_backward_weights::desc bd(
                                      algo, x_md, w_md, b_md, y_md, g.strides, g.dilates, g.pad_l, g.pad_r);
                                  return dnnl::convolution_backward_weights::primitive_desc(bd, attributes(),
                                                                                            engine(), hint);
                                });
      return Prims{dnnl::convolution_backward_weights(pd),
                   Operand::input(activationDesc(x.shape(), dt, f), pd.src_desc()),
                   Operand::input(activationDesc(gy.shape(), dt, f), pd.diff_dst_desc()),
                   Operand::output(userWeightsDesc(ws, p.groups, dt), pd.diff_weights_desc())};
    });
    Tensor x_buffer, gy_buffer, gw_buffer;
    const Mem gw = prims.out.target(out.weight.dataPtr(), gw_buffer);
    std::unordered_map<int, Mem> args{{DNNL_ARG_SRC, prims.a.read(x.dataPtr(), x_buffer)},
                                      {DNNL_ARG_DIFF_DST, prims.b.read(gy.dataPtr(), gy_buffer)},
                                      {DNNL_ARG_DIFF_WEIGHTS, gw}};
    if (with_bias)
      args.emplace(DNNL_ARG_DIFF_BIAS, Mem(vectorDesc(ws[0], x.dtype()), engine(), out.bias.dataPtr()));
    execute(prims.prim, args);
    prims.out.finish(gw, out.weight.dataPtr());
  } catch (const dnnl::error& e) {
    rethrow(e, "conv2d backward (weights)");
  }
  return out;
}

const ConvKernels kConv{LOCKSTEP_CONV_OPS(LOCKSTEP_KERNEL_ENTRY)};

}  // namespace lockstep::kernels::onednn

namespace lockstep::kernels {

bool cpuConvWinograd() { return onednn::winogradSwitch().load(std::memory_order_relaxed); }
void setCpuConvWinograd(bool on) { onednn::winogradSwitch().store(on, std::memory_order_relaxed); }

}  // namespace lockstep::kernels
