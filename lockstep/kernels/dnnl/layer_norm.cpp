// Layer norm with oneDNN's layer_normalization primitives. oneDNN normalises over the last dim, so
// a contiguous x is viewed as [rows, n] with n the product of normalized_shape (no copy).
#include "lockstep/kernels/layer_norm.h"

#include <dnnl.hpp>

#include "lockstep/kernels/dnnl/context.h"
#include "lockstep/kernels/tables/layer_norm.h"

namespace lockstep::kernels::onednn {

namespace {

using dnnl::normalization_flags;

struct Descs {
  dnnl::memory::desc data, stat, param;
};

Descs descsFor(int64_t rows, int64_t n) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  return {dnnl::memory::desc({rows, n}, dt::f32, tag::ab), dnnl::memory::desc({rows}, dt::f32, tag::a),
          dnnl::memory::desc({n}, dt::f32, tag::a)};
}

normalization_flags flagsFor(const Tensor& weight, const Tensor& bias) {
  auto f = normalization_flags::none;
  if (weight.defined()) f = f | normalization_flags::use_scale;
  if (bias.defined()) f = f | normalization_flags::use_shift;
  return f;
}

std::string keyFor(int64_t rows, int64_t n, normalization_flags f, double eps) {
  return std::to_string(rows) + "x" + std::to_string(n) + "f" + std::to_string(static_cast<unsigned>(f)) +
         "e" + std::to_string(eps);
}

dnnl::layer_normalization_forward::primitive_desc forwardPd(const Descs& d, normalization_flags f,
                                                            double eps) {
  auto fd = dnnl::layer_normalization_forward::desc(dnnl::prop_kind::forward_training, d.data, d.stat,
                                                    static_cast<float>(eps), f);
  return dnnl::layer_normalization_forward::primitive_desc(fd, attributes(), engine());
}

Tensor contiguousF32(const Tensor& t) { return t.isContiguous() ? t : t.contiguous(); }

}  // namespace

// y in x's dtype whatever y_dtype says: kernels::layerNormForward rounds it.
LayerNormOutput layerNormForward(const Tensor& x0, const Shape& normalized_shape, const Tensor& weight,
                                 const Tensor& bias, double eps, DType /*y_dtype*/) {
  if (x0.dtype() != DType::f32) throw NotSupportedError("oneDNN layer_norm kernels here are f32 only");
  const int64_t n = checkLayerNorm(x0, normalized_shape, weight, bias);
  const int64_t rows = n == 0 ? 0 : x0.numel() / n;
  // A non-contiguous input is copied once: cheaper than any strided normalisation loop.
  Tensor x = contiguousF32(x0);
  LayerNormOutput out{Tensor::empty(x.shape(), DType::f32), Tensor::empty({rows}, DType::f32),
                      Tensor::empty({rows}, DType::f32)};
  if (x.numel() == 0) return out;
  const Descs d = descsFor(rows, n);
  const auto f = flagsFor(weight, bias);
  static PrimitiveCache<dnnl::layer_normalization_forward> cache;
  try {
    auto& prim = cache.get(keyFor(rows, n, f, eps),
                           [&] { return dnnl::layer_normalization_forward(forwardPd(d, f, eps)); });
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, memory(d.data, x)},
                                               {DNNL_ARG_DST, memory(d.data, out.y)},
                                               {DNNL_ARG_MEAN, memory(d.stat, out.mean)},
                                               {DNNL_ARG_VARIANCE, memory(d.stat, out.variance)}};
    if (weight.defined()) args.emplace(DNNL_ARG_SCALE, memory(d.param, contiguousF32(weight)));
    if (bias.defined()) args.emplace(DNNL_ARG_SHIFT, memory(d.param, contiguousF32(bias)));
    execute(prim, args);
    stream().wait();
  } catch (const dnnl::error& err) {
    rethrow(err, "layer_norm forward");
  }
  return out;
}

LayerNormGrads layerNormBackward(const Tensor& gy0, const Tensor& x0, const Tensor& mean,
                                 const Tensor& variance, const Shape& normalized_shape, const Tensor& weight,
                                 const Tensor& bias, double eps) {
  if (x0.dtype() != DType::f32) throw NotSupportedError("oneDNN layer_norm kernels here are f32 only");
  const int64_t n = checkLayerNorm(x0, normalized_shape, weight, bias);
  const int64_t rows = n == 0 ? 0 : x0.numel() / n;
  LOCKSTEP_ENFORCE(mean.numel() == rows && variance.numel() == rows, ValueError,
                   "layer_norm backward: statistics of shapes ", shapeToString(mean.shape()), " and ",
                   shapeToString(variance.shape()), " do not have one entry per row (", rows, ")");
  Tensor x = contiguousF32(x0), gy = contiguousF32(gy0);
  LayerNormGrads out;
  out.gx = Tensor::empty(x.shape(), DType::f32);
  if (weight.defined()) out.gweight = Tensor::zeros(normalized_shape, DType::f32);
  if (bias.defined()) out.gbias = Tensor::zeros(normalized_shape, DType::f32);
  if (x.numel() == 0) return out;
  const Descs d = descsFor(rows, n);
  const auto f = flagsFor(weight, bias);
  static PrimitiveCache<dnnl::layer_normalization_backward> cache;
  try {
    auto& prim = cache.get(keyFor(rows, n, f, eps), [&] {
      // prop_kind::backward also computes the scale/shift gradients; backward_data does not.
      auto kind = f == normalization_flags::none ? dnnl::prop_kind::backward_data : dnnl::prop_kind::backward;
      auto bd =
          dnnl::layer_normalization_backward::desc(kind, d.data, d.data, d.stat, static_cast<float>(eps), f);
      return dnnl::layer_normalization_backward(dnnl::layer_normalization_backward::primitive_desc(
          bd, attributes(), engine(), forwardPd(d, f, eps)));
    });
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, memory(d.data, x)},
                                               {DNNL_ARG_DIFF_DST, memory(d.data, gy)},
                                               {DNNL_ARG_MEAN, memory(d.stat, contiguousF32(mean))},
                                               {DNNL_ARG_VARIANCE, memory(d.stat, contiguousF32(variance))},
                                               {DNNL_ARG_DIFF_SRC, memory(d.data, out.gx)}};
    if (weight.defined()) {
      args.emplace(DNNL_ARG_SCALE, memory(d.param, contiguousF32(weight)));
      args.emplace(DNNL_ARG_DIFF_SCALE, memory(d.param, out.gweight));
    }
    if (bias.defined()) {
      args.emplace(DNNL_ARG_SHIFT, memory(d.param, contiguousF32(bias)));
      args.emplace(DNNL_ARG_DIFF_SHIFT, memory(d.param, out.gbias));
    }
    execute(prim, args);
    stream().wait();
  } catch (const dnnl::error& err) {
    rethrow(err, "layer_norm backward");
  }
  return out;
}

const LayerNormKernels kLayerNorm{LOCKSTEP_LAYER_NORM_OPS(LOCKSTEP_KERNEL_ENTRY)};

}  // namespace lockstep::kernels::onednn
