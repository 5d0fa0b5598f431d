#include "lockstep/kernels/softmax.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <dnnl.hpp>
#include <limits>
#include <type_traits>

#include "lockstep/kernels/cpu/chunks.h"
#include "lockstep/kernels/dispatch.h"
#include "lockstep/kernels/dnnl/context.h"
#include "lockstep/kernels/tables/softmax.h"

namespace lockstep::kernels::onednn {

namespace {
// oneDNN takes any plain strided layout: describe the tensor as it is rather than copying it.

bool isNan16(uint16_t v, DType t) { return (v & 0x7FFF) > (t == DType::bf16 ? 0x7F80 : 0x7C00); }

template <typename T, typename IsNan>
void nanRows(T* y, int64_t n, int64_t rows, T quiet_nan, IsNan is_nan) {
  cpu::forEachChunk(rows, std::max<int64_t>(1, 65536 / n), [&](int64_t, int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      T* p = y + r * n;
      bool nan = false;
      for (int64_t j = 0; j < n; ++j) nan = nan || is_nan(p[j]);
      if (nan) std::fill(p, p + n, quiet_nan);
    }
  });
}

// oneDNN 2.6's softmax over the dimension innermost in memory takes a row's max ignoring a NaN,
// so a NaN (or +inf, whose exp(inf - inf) is NaN) leaves the row's other outputs finite:
// [1, nan, 2] gave [0, nan, 0]. torch's whole row is NaN; a row with a NaN output is made so here.
// (Its kernels for the other dimensions propagate NaN themselves.) In a dense tensor whose
// softmax dimension has stride 1 the rows are consecutive runs of its size.
void nanWholeRows(const Tensor& y, int64_t dim) {
  const int64_t n = y.size(dim);
  if (!y.isDense() || n < 2 || y.stride(dim) != 1) return;
  const int64_t rows = y.numel() / n;
  if (y.dtype() == DType::f32) {
    nanRows(y.data<float>(), n, rows, std::numeric_limits<float>::quiet_NaN(),
            [](float v) { return std::isnan(v); });
  } else if (isLowPrecision(y.dtype())) {
    const DType t = y.dtype();
    nanRows(static_cast<uint16_t*>(y.dataPtr()), n, rows,
            static_cast<uint16_t>(t == DType::bf16 ? 0x7FC0 : 0x7E00),
            [t](uint16_t v) { return isNan16(v, t); });
  }
}

// Over a dimension of size 1 softmax is 1 and log_softmax 0 (x - max with max = x), NaN where x is
// not finite, exactly as torch: oneDNN's log_softmax gave 1.4e-6 (its log of the sum 1).
template <typename T, typename IsFinite>
void fillSizeOne(const T* x, T* y, int64_t n, T value, T quiet_nan, IsFinite is_finite) {
  cpu::forEachChunk(n, 65536, [&](int64_t, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = is_finite(x[i]) ? value : quiet_nan;
  });
}

bool sizeOneDim(const Tensor& x, const Tensor& y, bool log) {
  const int64_t n = x.numel();
  if (x.dtype() == DType::f32) {
    fillSizeOne(x.data<float>(), y.data<float>(), n, log ? 0.0f : 1.0f,
                std::numeric_limits<float>::quiet_NaN(), [](float v) { return std::isfinite(v); });
    return true;
  }
  if (!isLowPrecision(x.dtype())) return false;
  const bool bf16 = x.dtype() == DType::bf16;
  const uint16_t inf = bf16 ? 0x7F80 : 0x7C00, one = bf16 ? 0x3F80 : 0x3C00;
  fillSizeOne(static_cast<const uint16_t*>(x.dataPtr()), static_cast<uint16_t*>(y.dataPtr()), n,
              log ? uint16_t{0} : one, static_cast<uint16_t>(bf16 ? 0x7FC0 : 0x7E00),
              [inf](uint16_t v) { return (v & 0x7FFF) < inf; });
  return true;
}

template <typename Fwd>
Tensor forward(const Tensor& x0, int64_t dim0, const char* op) {
  const int64_t dim = normalizeDim(dim0, x0.dim(), op);
  Tensor x = dense(x0);
  Tensor y = Tensor::emptyLike(x);
  if (x.numel() == 0) return y;
  if (x.size(dim) == 1 && sizeOneDim(x, y, std::is_same_v<Fwd, dnnl::logsoftmax_forward>)) return y;
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
  nanWholeRows(y, dim);
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
