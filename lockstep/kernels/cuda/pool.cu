#include "lockstep/kernels/cuda/channel.cuh"
#include "lockstep/kernels/cuda/handles.h"
#include "lockstep/kernels/cuda/pool.h"
#include "lockstep/kernels/layout.h"
#include "lockstep/tensor/cuda/runtime.h"

namespace lockstep::kernels::cuda {

namespace {

namespace rt = ::lockstep::cuda;

// The windows along one axis: pooling (kernel k, stride s, padding pad) or adaptive (k = 0).
struct Axis {
  int64_t in = 0, out = 0, k = 0, s = 1, pad = 0;
  // One output whose window is the whole axis, without padding.
  bool covers_all() const { return out == 1 && pad == 0 && (k == 0 || k == in); }
  // Window o reads [begin, end); its divisor counting padding (not ceil_mode's overhang) is `padded`.
  __device__ __forceinline__ void window(int64_t o, int64_t& begin, int64_t& end, int64_t& padded) const {
    if (k == 0) {
      begin = o * in / out;
      end = ((o + 1) * in + out - 1) / out;
      padded = end - begin;
      return;
    }
    const int64_t start = o * s - pad, stop = min(start + k, in + pad);
    begin = max(start, int64_t{0});
    end = min(stop, in);
    padded = stop - start;
  }
  // The outputs whose windows may cover input i: [lo, hi) (a superset for adaptive windows).
  __device__ __forceinline__ void covering(int64_t i, int64_t& lo, int64_t& hi) const {
    if (k == 0) {
      lo = max(i * out / in - 1, int64_t{0});
      hi = min(((i + 1) * out + in - 1) / in + 1, out);
      return;
    }
    lo = i + pad < k ? 0 : (i + pad - k) / s + 1;
    hi = min((i + pad) / s + 1, out);
  }
};

template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

// The first maximum of a window within its plane (row-major index), NaN winning, as PyTorch.
template <typename T>
__device__ int64_t argmax(const T* x, const Geometry4d& g, int64_t n, int64_t c, int64_t hb, int64_t he,
                          int64_t wb, int64_t we) {
  int64_t best = hb * g.w + wb;
  Acc<T> bv = -INFINITY;
  for (int64_t a = hb; a < he; ++a) {
    for (int64_t b = wb; b < we; ++b) {
      const Acc<T> v = rt::castTo<Acc<T>>(x[g.at(n, c, a, b)]);
      if (v > bv || isnan(v)) {
        bv = v;
        best = a * g.w + b;
        if (isnan(v)) return best;
      }
    }
  }
  return best;
}

template <typename T>
__global__ void maxForward(const T* x, Geometry4d gx, T* y, Geometry4d gy, int64_t* where, Axis ah, Axis aw) {
  const int64_t total = gy.numel();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t n, c, oh, ow, hb, he, wb, we, unused;
    gy.index(i, n, c, oh, ow);
    ah.window(oh, hb, he, unused);
    aw.window(ow, wb, we, unused);
    const int64_t at = argmax(x, gx, n, c, hb, he, wb, we);
    y[gy.at(n, c, oh, ow)] = x[gx.at(n, c, at / gx.w, at % gx.w)];
    if (where) where[((n * gy.c + c) * gy.h + oh) * gy.w + ow] = at;
  }
}

// where (indices) or x (to find the maxima again): one of them is given.
template <typename T>
__global__ void maxBackward(const T* g, Geometry4d gg, const int64_t* where, const T* x, Geometry4d gx,
                            T* out, Geometry4d go, Axis ah, Axis aw) {
  const int64_t total = go.numel();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t n, c, h, w, hl, hh, wl, wh;
    go.index(i, n, c, h, w);
    ah.covering(h, hl, hh);
    aw.covering(w, wl, wh);
    const int64_t self = h * go.w + w;
    Acc<T> sum = 0;
    for (int64_t oh = hl; oh < hh; ++oh) {
      for (int64_t ow = wl; ow < wh; ++ow) {
        int64_t at;
        if (where) {
          at = where[((n * gg.c + c) * gg.h + oh) * gg.w + ow];
        } else {
          int64_t hb, he, wb, we, unused;
          ah.window(oh, hb, he, unused);
          aw.window(ow, wb, we, unused);
          if (h < hb || h >= he || w < wb || w >= we) continue;
          at = argmax(x, gx, n, c, hb, he, wb, we);
        }
        if (at == self) sum += rt::castTo<Acc<T>>(g[gg.at(n, c, oh, ow)]);
      }
    }
    out[go.at(n, c, h, w)] = rt::castTo<T>(sum);
  }
}

template <typename T>
__global__ void avgForward(const T* x, Geometry4d gx, T* y, Geometry4d gy, Axis ah, Axis aw,
                           bool include_pad) {
  const int64_t total = gy.numel();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t n, c, oh, ow, hb, he, hp, wb, we, wp;
    gy.index(i, n, c, oh, ow);
    ah.window(oh, hb, he, hp);
    aw.window(ow, wb, we, wp);
    Acc<T> sum = 0;
    for (int64_t a = hb; a < he; ++a) {
      for (int64_t b = wb; b < we; ++b) sum += rt::castTo<Acc<T>>(x[gx.at(n, c, a, b)]);
    }
    const int64_t count = include_pad ? hp * wp : (he - hb) * (we - wb);
    y[gy.at(n, c, oh, ow)] = rt::castTo<T>(sum / static_cast<Acc<T>>(count));
  }
}

template <typename T>
__global__ void avgBackward(const T* g, Geometry4d gg, T* out, Geometry4d go, Axis ah, Axis aw,
                            bool include_pad) {
  const int64_t total = go.numel();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t n, c, h, w, hl, hh, wl, wh;
    go.index(i, n, c, h, w);
    ah.covering(h, hl, hh);
    aw.covering(w, wl, wh);
    Acc<T> sum = 0;
    for (int64_t oh = hl; oh < hh; ++oh) {
      int64_t hb, he, hp;
      ah.window(oh, hb, he, hp);
      if (h < hb || h >= he) continue;
      for (int64_t ow = wl; ow < wh; ++ow) {
        int64_t wb, we, wp;
        aw.window(ow, wb, we, wp);
        if (w < wb || w >= we) continue;
        const int64_t count = include_pad ? hp * wp : (he - hb) * (we - wb);
        sum += rt::castTo<Acc<T>>(g[gg.at(n, c, oh, ow)]) / static_cast<Acc<T>>(count);
      }
    }
    out[go.at(n, c, h, w)] = rt::castTo<T>(sum);
  }
}

// The backward of a pooling to 1x1 over the whole plane (a ResNet's head): every element of plane
// (n, c) gets g[n, c] / (H * W). gx dense (NCHW or NHWC), 32-bit indices; g in any strides.
template <typename T>
__global__ void planeMeanBackward(const T* g, int64_t gsn, int64_t gsc, T* out, uint32_t total, uint32_t C,
                                  uint32_t HW, bool nhwc) {
  const Acc<T> scale = Acc<T>(1) / static_cast<Acc<T>>(HW);
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    const uint32_t c = nhwc ? i % C : (i / HW) % C, n = i / (HW * C);
    out[i] = rt::castTo<T>(rt::castTo<Acc<T>>(g[n * gsn + c * gsc]) * scale);
  }
}

std::pair<Axis, Axis> axes(const Shape& xs, const Shape& ys, const Pool2dParams& p) {
  return {{xs[2], ys[2], p.kernel[0], p.stride[0], p.padding[0]},
          {xs[3], ys[3], p.kernel[1], p.stride[1], p.padding[1]}};
}
std::pair<Axis, Axis> adaptiveAxes(const Shape& xs, std::array<int64_t, 2> out) {
  return {{xs[2], out[0], 0, 1, 0}, {xs[3], out[1], 0, 1, 0}};
}

Tensor like(const Tensor& x, const Shape& shape) {
  return Tensor::empty(shape, x.dtype(), formatOf(x), x.device());
}
Geometry4d geometry(const Tensor& t) { return Geometry4d::of(t, t.isChannelsLast()); }

// Calls launch(T{}) for the floating dtypes; NotSupportedError naming op otherwise.
template <typename Fn>
void floating(DType t, const char* op, Fn&& launch) {
  LOCKSTEP_ENFORCE(isFloating(t), NotSupportedError, op, " on a GPU takes floating tensors, got ",
                   dtypeName(t));
  rt::visitDeviceType(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, __nv_bfloat16> ||
                  std::is_same_v<T, __half>) {
      launch(tag);
    }
  });
  LOCKSTEP_CUDA_CHECK(cudaGetLastError());
}

cudaStream_t streamOf(const Tensor& t) { return rt::currentStream(t.device().index).handle(); }

template <typename T>
const T* in(const Tensor& t) {
  return static_cast<const T*>(t.devicePtr());
}
template <typename T>
T* out(const Tensor& t) {
  return static_cast<T*>(t.devicePtr());
}

Tensor avgForwardWith(const Tensor& x, const Shape& ys, std::pair<Axis, Axis> a, bool include_pad,
                      const char* op) {
  Tensor y = like(x, ys);
  if (y.numel() == 0) return y;
  floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    avgForward<T><<<rt::blocksFor(y.numel()), rt::kBlock, 0, streamOf(x)>>>(
        in<T>(x), geometry(x), out<T>(y), geometry(y), a.first, a.second, include_pad);
  });
  return y;
}

Tensor avgBackwardWith(const Tensor& gy, const Tensor& x, std::pair<Axis, Axis> a, bool include_pad,
                       const char* op) {
  Tensor gx = like(x, x.shape());
  if (gx.numel() == 0) return gx;
  // One window over the whole plane (every output 1x1 with no padding): a broadcast, without the
  // window arithmetic per element.
  const bool whole_plane =
      gy.size(2) == 1 && gy.size(3) == 1 && a.first.covers_all() && a.second.covers_all();
  if (whole_plane && gx.numel() < (int64_t{1} << 31) && (gx.isContiguous() || gx.isChannelsLast())) {
    floating(x.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      planeMeanBackward<T><<<rt::blocksFor(gx.numel()), rt::kBlock, 0, streamOf(x)>>>(
          in<T>(gy), gy.stride(0), gy.stride(1), out<T>(gx), static_cast<uint32_t>(gx.numel()),
          static_cast<uint32_t>(gx.size(1)), static_cast<uint32_t>(gx.size(2) * gx.size(3)),
          formatOf(gx) == MemoryFormat::channels_last);
    });
    return gx;
  }
  floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    avgBackward<T><<<rt::blocksFor(gx.numel()), rt::kBlock, 0, streamOf(x)>>>(
        in<T>(gy), geometry(gy), out<T>(gx), geometry(gx), a.first, a.second, include_pad);
  });
  return gx;
}

}  // namespace

MaxPool2dResult maxPool2dForward(const Tensor& x, const Pool2dParams& p, bool training) {
  const Shape ys = pool2dOutputShape(x.shape(), p, "max_pool2d");
  MaxPool2dResult r{like(x, ys), Tensor()};
  if (training) r.workspace = Tensor::empty(ys, DType::i64, MemoryFormat::contiguous, x.device());
  if (r.y.numel() == 0) return r;
  const auto a = axes(x.shape(), ys, p);
  floating(x.dtype(), "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    maxForward<T><<<rt::blocksFor(r.y.numel()), rt::kBlock, 0, streamOf(x)>>>(
        in<T>(x), geometry(x), out<T>(r.y), geometry(r.y), training ? out<int64_t>(r.workspace) : nullptr,
        a.first, a.second);
  });
  return r;
}

Tensor maxPool2dBackward(const Tensor& gy, const Tensor& x, const Tensor& workspace, const Pool2dParams& p) {
  checkSameDevice("max_pool2d backward", gy, x, workspace);
  if (workspace.defined()) {
    LOCKSTEP_ENFORCE(
        workspace.dtype() == DType::i64 && workspace.numel() == gy.numel() && workspace.isContiguous(),
        ValueError, "max_pool2d backward: the workspace ", workspace.describe(),
        " is not the GPU kernels' (one i64 index per output of ", shapeToString(gy.shape()),
        "); pass the workspace of the same kernels' forward");
  }
  Tensor gx = like(x, x.shape());
  if (gx.numel() == 0) return gx;
  const auto a = axes(x.shape(), gy.shape(), p);
  floating(x.dtype(), "max_pool2d backward", [&](auto tag) {
    using T = decltype(tag);
    maxBackward<T><<<rt::blocksFor(gx.numel()), rt::kBlock, 0, streamOf(x)>>>(
        in<T>(gy), geometry(gy), workspace.defined() ? in<int64_t>(workspace) : nullptr,
        workspace.defined() ? nullptr : in<T>(x), geometry(x), out<T>(gx), geometry(gx), a.first, a.second);
  });
  return gx;
}

Tensor avgPool2dForward(const Tensor& x, const Pool2dParams& p) {
  const Shape ys = pool2dOutputShape(x.shape(), p, "avg_pool2d");
  return avgForwardWith(x, ys, axes(x.shape(), ys, p), p.count_include_pad, "avg_pool2d");
}

Tensor avgPool2dBackward(const Tensor& gy, const Tensor& x, const Pool2dParams& p) {
  checkSameDevice("avg_pool2d backward", gy, x);
  return avgBackwardWith(gy, x, axes(x.shape(), gy.shape(), p), p.count_include_pad, "avg_pool2d backward");
}

Tensor adaptiveAvgPool2dForward(const Tensor& x, std::array<int64_t, 2> o) {
  return avgForwardWith(x, {x.size(0), x.size(1), o[0], o[1]}, adaptiveAxes(x.shape(), o), false,
                        "adaptive_avg_pool2d");
}

Tensor adaptiveAvgPool2dBackward(const Tensor& gy, const Tensor& x, std::array<int64_t, 2> o) {
  checkSameDevice("adaptive_avg_pool2d backward", gy, x);
  return avgBackwardWith(gy, x, adaptiveAxes(x.shape(), o), false, "adaptive_avg_pool2d backward");
}

}  // namespace lockstep::kernels::cuda
