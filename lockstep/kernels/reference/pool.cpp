// Plain loops in double precision following PyTorch's pooling rules: the ground truth for oneDNN.
#include "lockstep/kernels/pool.h"

#include <cmath>
#include <limits>

#include "lockstep/kernels/layout.h"
#include "lockstep/kernels/tables/pool.h"
#include "lockstep/util/error.h"

namespace lockstep::kernels::reference {

namespace {
// One output position's window along one axis: the input range [begin, end) it reads and, for
// count_include_pad, its size counting the padding (but not what ceil_mode adds beyond it).
struct Window {
  int64_t begin, end, padded_size;
};
using Windows = std::vector<Window>;

Windows poolWindows(int64_t in, int64_t out, int64_t k, int64_t s, int64_t pad) {
  Windows w;
  for (int64_t o = 0; o < out; ++o) {
    const int64_t start = o * s - pad, stop = std::min(start + k, in + pad);
    w.push_back({std::max<int64_t>(start, 0), std::min(stop, in), stop - start});
  }
  return w;
}

Windows adaptiveWindows(int64_t in, int64_t out) {
  Windows w;
  for (int64_t o = 0; o < out; ++o) {
    const int64_t begin = o * in / out, end = ((o + 1) * in + out - 1) / out;
    w.push_back({begin, end, end - begin});
  }
  return w;
}

// Calls fn(plane_offset_x, plane_offset_y, window_h, window_w, y_index) for every output element
// of a contiguous [N*C, H, W] -> [N*C, oh, ow] pooling.
template <typename Fn>
void forEachWindow(const Shape& xs, const Windows& wh, const Windows& ww, Fn&& fn) {
  const int64_t planes = xs[0] * xs[1], oh = static_cast<int64_t>(wh.size()),
                ow = static_cast<int64_t>(ww.size());
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) fn(pl * xs[2] * xs[3], wh[i], ww[j], (pl * oh + i) * ow + j);
}

Tensor avgForward(const Tensor& x, const Windows& wh, const Windows& ww, bool include_pad) {
  Tensor xd = x.to(DType::f64).contiguous();
  const Shape& xs = x.shape();
  Tensor y = Tensor::empty({xs[0], xs[1], static_cast<int64_t>(wh.size()), static_cast<int64_t>(ww.size())},
                           DType::f64);
  const double* px = xd.data<double>();
  double* py = y.data<double>();
  forEachWindow(xs, wh, ww, [&](int64_t base, const Window& h, const Window& w, int64_t yi) {
    double sum = 0;
    for (int64_t a = h.begin; a < h.end; ++a)
      for (int64_t b = w.begin; b < w.end; ++b) sum += px[base + a * xs[3] + b];
    const double n =
        include_pad ? double(h.padded_size * w.padded_size) : double((h.end - h.begin) * (w.end - w.begin));
    py[yi] = sum / n;
  });
  return inFormat(y.to(x.dtype()), formatOf(x));
}

Tensor avgBackward(const Tensor& gy, const Tensor& x, const Windows& wh, const Windows& ww,
                   bool include_pad) {
  Tensor g = gy.to(DType::f64).contiguous();
  const Shape& xs = x.shape();
  Tensor gx = Tensor::zeros(xs, DType::f64);
  const double* pg = g.data<double>();
  double* px = gx.data<double>();
  forEachWindow(xs, wh, ww, [&](int64_t base, const Window& h, const Window& w, int64_t yi) {
    const double n =
        include_pad ? double(h.padded_size * w.padded_size) : double((h.end - h.begin) * (w.end - w.begin));
    for (int64_t a = h.begin; a < h.end; ++a)
      for (int64_t b = w.begin; b < w.end; ++b) px[base + a * xs[3] + b] += pg[yi] / n;
  });
  return inFormat(gx.to(x.dtype()), formatOf(x));
}

std::pair<Windows, Windows> windowsFor(const Shape& xs, const Pool2dParams& p, const char* op) {
  const Shape ys = pool2dOutputShape(xs, p, op);
  return {poolWindows(xs[2], ys[2], p.kernel[0], p.stride[0], p.padding[0]),
          poolWindows(xs[3], ys[3], p.kernel[1], p.stride[1], p.padding[1])};
}

// Index (within the plane) of the first maximum of a window, as PyTorch picks it (NaN wins).
int64_t argmax(const double* plane, int64_t width, const Window& h, const Window& w) {
  int64_t best = h.begin * width + w.begin;
  double bv = -std::numeric_limits<double>::infinity();
  for (int64_t a = h.begin; a < h.end; ++a)
    for (int64_t b = w.begin; b < w.end; ++b) {
      const double v = plane[a * width + b];
      if (v > bv || std::isnan(v)) {
        bv = v;
        best = a * width + b;
        if (std::isnan(v)) return best;
      }
    }
  return best;
}
}  // namespace

MaxPool2dResult maxPool2dForward(const Tensor& x, const Pool2dParams& p, bool training) {
  auto [wh, ww] = windowsFor(x.shape(), p, "max_pool2d");
  Tensor xd = x.to(DType::f64).contiguous();
  const Shape& xs = x.shape();
  const Shape ys = {xs[0], xs[1], static_cast<int64_t>(wh.size()), static_cast<int64_t>(ww.size())};
  Tensor y = Tensor::empty(ys, DType::f64);
  // Training keeps each maximum's index within its plane (row-major, like y), as PyTorch's
  // indices: the backward then needs no input values.
  Tensor where = training ? Tensor::empty(ys, DType::i64) : Tensor();
  forEachWindow(xs, wh, ww, [&](int64_t base, const Window& h, const Window& w, int64_t yi) {
    const double* plane = xd.data<double>() + base;
    const int64_t at = argmax(plane, xs[3], h, w);
    y.data<double>()[yi] = plane[at];
    if (training) where.data<int64_t>()[yi] = at;
  });
  return {inFormat(y.to(x.dtype()), formatOf(x)), where};
}

Tensor maxPool2dBackward(const Tensor& gy, const Tensor& x, const Tensor& workspace, const Pool2dParams& p) {
  auto [wh, ww] = windowsFor(x.shape(), p, "max_pool2d");
  Tensor g = gy.to(DType::f64).contiguous();
  const Shape& xs = x.shape();
  Tensor gx = Tensor::zeros(xs, DType::f64);
  if (workspace.defined()) {
    LOCKSTEP_ENFORCE(workspace.dtype() == DType::i64 && workspace.numel() == g.numel(), ValueError,
                     "max_pool2d backward: the workspace ", workspace.describe(),
                     " is not the reference kernels' (one i64 index per output of ",
                     shapeToString(gy.shape()), "); pass the workspace of the same kernels' forward");
    const int64_t* where = workspace.data<int64_t>();
    forEachWindow(xs, wh, ww, [&](int64_t base, const Window&, const Window&, int64_t yi) {
      gx.data<double>()[base + where[yi]] += g.data<double>()[yi];
    });
  } else {
    Tensor xd = x.to(DType::f64).contiguous();
    forEachWindow(xs, wh, ww, [&](int64_t base, const Window& h, const Window& w, int64_t yi) {
      gx.data<double>()[base + argmax(xd.data<double>() + base, xs[3], h, w)] += g.data<double>()[yi];
    });
  }
  return inFormat(gx.to(x.dtype()), formatOf(x));
}

Tensor avgPool2dForward(const Tensor& x, const Pool2dParams& p) {
  auto [wh, ww] = windowsFor(x.shape(), p, "avg_pool2d");
  return avgForward(x, wh, ww, p.count_include_pad);
}

Tensor avgPool2dBackward(const Tensor& gy, const Tensor& x, const Pool2dParams& p) {
  auto [wh, ww] = windowsFor(x.shape(), p, "avg_pool2d");
  return avgBackward(gy, x, wh, ww, p.count_include_pad);
}

Tensor adaptiveAvgPool2dForward(const Tensor& x, std::array<int64_t, 2> out) {
  return avgForward(x, adaptiveWindows(x.size(2), out[0]), adaptiveWindows(x.size(3), out[1]), false);
}

Tensor adaptiveAvgPool2dBackward(const Tensor& gy, const Tensor& x, std::array<int64_t, 2> out) {
  return avgBackward(gy, x, adaptiveWindows(x.size(2), out[0]), adaptiveWindows(x.size(3), out[1]), false);
}

const PoolKernels kPool{LOCKSTEP_POOL_OPS(LOCKSTEP_KERNEL_ENTRY)};

}  // namespace lockstep::kernels::reference
