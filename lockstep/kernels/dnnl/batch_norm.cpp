// oneDNN batch normalisation, cached per shape/layout/flags. Eval mode runs with the running
// statistics as inputs (use_global_stats); training returns the batch statistics for the backward
// pass and the running-statistics update (done by the dispatching entry point). A residual and a
// relu run as oneDNN's binary primitive and the cpu loops' relu after it (the bf16 path; f32 takes lockstep's
// own kernels, which fuse them).
#include "lockstep/kernels/batch_norm.h"

#include <dnnl.hpp>
#include <sstream>
#include <unordered_map>

#include "lockstep/kernels/dnnl/activation_layout.h"
#include "lockstep/kernels/tables/batch_norm.h"

namespace lockstep::kernels::onednn {

namespace {
using Mem = dnnl::memory;
using Flags = dnnl::normalization_flags;

Flags flagsFor(bool scale, bool shift, bool training) {
  Flags f = Flags::none;
  if (scale) f = f | Flags::use_scale;
  if (shift) f = f | Flags::use_shift;
  if (!training) f = f | Flags::use_global_stats;
  return f;
}

std::string keyFor(const Tensor& x, MemoryFormat f, Flags flags, double eps) {
  std::ostringstream os;
  os.precision(17);
  os << dtypeName(x.dtype()) << shapeToString(x.shape()) << formatKey(f) << "f"
     << static_cast<unsigned>(flags) << "e" << eps;
  return os.str();
}

dnnl::batch_normalization_forward::primitive_desc forwardPd(const Mem::desc& md, Flags flags, double eps) {
  return {dnnl::batch_normalization_forward::desc(dnnl::prop_kind::forward_training, md,
                                                  static_cast<float>(eps), flags),
          attributes(), engine()};
}

// A [C] f32 copy (the statistics are saved for the backward pass, so never alias the caller's).
Tensor f32Copy(const Tensor& t) {
  Tensor out = Tensor::empty(t.shape(), DType::f32);
  out.copyFrom(t);
  return out;
}
// t itself when it is already [C] f32 contiguous.
Tensor f32View(const Tensor& t) { return t.dtype() == DType::f32 && t.isContiguous() ? t : f32Copy(t); }

Mem vec(const Tensor& t) { return Mem(vectorDesc(t.numel()), engine(), t.dataPtr()); }

BatchNormResult normalise(const Tensor& x0, const Tensor& weight, const Tensor& bias,
                          const Tensor& running_mean, const Tensor& running_var, const BatchNormParams& p) {
  const MemoryFormat f = formatOf(x0);
  Tensor x = inFormat(x0, f);
  const int64_t C = x.size(1);
  BatchNormResult r{Tensor::empty(x.shape(), x.dtype(), f), Tensor(), Tensor()};
  if (p.training) {
    r.mean = Tensor::empty({C}, DType::f32);
    r.var = Tensor::empty({C}, DType::f32);
  } else {
    r.mean = f32Copy(running_mean);
    r.var = f32Copy(running_var);
  }
  if (x.numel() == 0) return r;
  const Flags flags = flagsFor(weight.defined(), bias.defined(), p.training);
  static PrimitiveCache<dnnl::batch_normalization_forward> cache;
  const Mem::desc md = activationDesc(x.shape(), x.dtype(), f);
  try {
    auto& prim = cache.get(keyFor(x, f, flags, p.eps),
                           [&] { return dnnl::batch_normalization_forward(forwardPd(md, flags, p.eps)); });
    std::unordered_map<int, Mem> args{{DNNL_ARG_SRC, Mem(md, engine(), x.dataPtr())},
                                      {DNNL_ARG_DST, Mem(md, engine(), r.y.dataPtr())},
                                      {DNNL_ARG_MEAN, vec(r.mean)},
                                      {DNNL_ARG_VARIANCE, vec(r.var)}};
    Tensor w, b;
    if (weight.defined()) args.emplace(DNNL_ARG_SCALE, vec(w = f32View(weight)));
    if (bias.defined()) args.emplace(DNNL_ARG_SHIFT, vec(b = f32View(bias)));
    execute(prim, args);
  } catch (const dnnl::error& e) {
    rethrow(e, "batch_norm2d forward");
  }
  return r;
}

BatchNormGrads normaliseBackward(const Tensor& gy0, const Tensor& x0, const Tensor& weight, bool with_bias,
                                 const Tensor& mean0, const Tensor& var0, const BatchNormParams& p) {
  const MemoryFormat f = formatOf(x0);
  Tensor x = inFormat(x0, f), gy = inFormat(gy0, f);
  const int64_t C = x.size(1);
  BatchNormGrads g;
  g.x = Tensor::empty(x.shape(), x.dtype(), f);
  if (weight.defined()) g.weight = Tensor::empty({C}, DType::f32);
  if (with_bias) g.bias = Tensor::empty({C}, DType::f32);
  if (x.numel() == 0) {
    if (g.weight.defined()) g.weight.zero();
    if (g.bias.defined()) g.bias.zero();
    return g;
  }
  const Flags flags = flagsFor(weight.defined(), with_bias, p.training);
  static PrimitiveCache<dnnl::batch_normalization_backward> cache;
  const Mem::desc md = activationDesc(x.shape(), x.dtype(), f);
  try {
    auto& prim = cache.get(keyFor(x, f, flags, p.eps), [&] {
      const bool params = weight.defined() || with_bias;
      dnnl::batch_normalization_backward::desc bd(
          params ? dnnl::prop_kind::backward : dnnl::prop_kind::backward_data, md, md,
          static_cast<float>(p.eps), flags);
      return dnnl::batch_normalization_backward(dnnl::batch_normalization_backward::primitive_desc(
          bd, attributes(), engine(), forwardPd(md, flags, p.eps)));
    });
    Tensor mean = f32View(mean0), var = f32View(var0), w;
    std::unordered_map<int, Mem> args{{DNNL_ARG_SRC, Mem(md, engine(), x.dataPtr())},
                                      {DNNL_ARG_DIFF_DST, Mem(md, engine(), gy.dataPtr())},
                                      {DNNL_ARG_DIFF_SRC, Mem(md, engine(), g.x.dataPtr())},
                                      {DNNL_ARG_MEAN, vec(mean)},
                                      {DNNL_ARG_VARIANCE, vec(var)}};
    if (weight.defined()) {
      args.emplace(DNNL_ARG_SCALE, vec(w = f32View(weight)));
      args.emplace(DNNL_ARG_DIFF_SCALE, vec(g.weight));
    }
    Tensor unused_shift;
    if (with_bias) {
      // oneDNN 2.6 lists SHIFT as an input of the backward pass although its value is never read.
      args.emplace(DNNL_ARG_SHIFT, vec(unused_shift = Tensor::zeros({C}, DType::f32)));
      args.emplace(DNNL_ARG_DIFF_SHIFT, vec(g.bias));
    }
    execute(prim, args);
  } catch (const dnnl::error& e) {
    rethrow(e, "batch_norm2d backward");
  }
  if (weight.defined() && weight.dtype() != DType::f32) g.weight = g.weight.to(weight.dtype());
  if (with_bias && x.dtype() != DType::f32) g.bias = g.bias.to(x.dtype());
  return g;
}

}  // namespace

const BatchNormKernels kBatchNorm =
    ComposedBatchNorm<&normalise, &normaliseBackward, kBinary, cpu::kActivation>::table();

}  // namespace lockstep::kernels::onednn
