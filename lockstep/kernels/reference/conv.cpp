// Plain loops in double precision: the ground truth the oneDNN convolution is tested against.
#include "lockstep/kernels/conv.h"

#include "lockstep/kernels/layout.h"
#include "lockstep/kernels/tables/conv.h"

namespace lockstep::kernels::reference {

namespace {
// Contiguous f64 copy and its row-major data.
struct F64 {
  Tensor t;
  explicit F64(const Tensor& src) : t(src.to(DType::f64).contiguous()) {}
  const double* data() const { return t.data<double>(); }
};

// Calls fn(x_index, w_index, y_index) (row-major element indices) for every (output element, kernel
// tap) pair whose input position lies inside x: the one loop nest that all three passes share.
template <typename Fn>
void forEachTap(const Shape& xs, const Shape& ws, const Shape& ys, const Conv2dParams& p, Fn&& fn) {
  const int64_t cg = ws[1], og = ws[0] / p.groups;
  for (int64_t n = 0; n < ys[0]; ++n)
    for (int64_t o = 0; o < ys[1]; ++o)
      for (int64_t oy = 0; oy < ys[2]; ++oy)
        for (int64_t ox = 0; ox < ys[3]; ++ox) {
          const int64_t y_index = ((n * ys[1] + o) * ys[2] + oy) * ys[3] + ox;
          for (int64_t c = 0; c < cg; ++c) {
            const int64_t xc = (o / og) * cg + c;
            for (int64_t ky = 0; ky < ws[2]; ++ky) {
              const int64_t iy = oy * p.stride[0] - p.padding[0] + ky * p.dilation[0];
              if (iy < 0 || iy >= xs[2]) continue;
              for (int64_t kx = 0; kx < ws[3]; ++kx) {
                const int64_t ix = ox * p.stride[1] - p.padding[1] + kx * p.dilation[1];
                if (ix < 0 || ix >= xs[3]) continue;
                fn(((n * xs[1] + xc) * xs[2] + iy) * xs[3] + ix, ((o * cg + c) * ws[2] + ky) * ws[3] + kx,
                   y_index);
              }
            }
          }
        }
}
}  // namespace

Tensor conv2dForward(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p) {
  const Shape ys = conv2dOutputShape(x.shape(), w.shape(), p);
  F64 xd(x), wd(w);
  Tensor y = Tensor::zeros(ys, DType::f64);
  double* py = y.data<double>();
  forEachTap(x.shape(), w.shape(), ys, p,
             [&](int64_t xi, int64_t wi, int64_t yi) { py[yi] += xd.data()[xi] * wd.data()[wi]; });
  if (b.defined()) {
    F64 bd(b);
    const int64_t plane = ys[2] * ys[3];
    for (int64_t i = 0; i < y.numel(); ++i) py[i] += bd.data()[(i / plane) % ys[1]];
  }
  if (p.fuse_relu) {
    for (int64_t i = 0; i < y.numel(); ++i) py[i] = py[i] < 0 ? 0.0 : py[i];  // NaN stays, as torch.relu
  }
  return inFormat(y.to(x.dtype()), formatOf(x));
}

Tensor conv2dBackwardData(const Tensor& gy, const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  F64 gyd(gy), wd(w);
  Tensor gx = Tensor::zeros(x.shape(), DType::f64);
  double* pgx = gx.data<double>();
  forEachTap(x.shape(), w.shape(), gy.shape(), p,
             [&](int64_t xi, int64_t wi, int64_t yi) { pgx[xi] += gyd.data()[yi] * wd.data()[wi]; });
  return inFormat(gx.to(x.dtype()), formatOf(x));
}

Conv2dWeightGrads conv2dBackwardWeights(const Tensor& gy, const Tensor& x, const Shape& ws, bool with_bias,
                                        const Conv2dParams& p) {
  F64 gyd(gy), xd(x);
  Tensor gw = Tensor::zeros(ws, DType::f64);
  double* pgw = gw.data<double>();
  forEachTap(x.shape(), ws, gy.shape(), p,
             [&](int64_t xi, int64_t wi, int64_t yi) { pgw[wi] += gyd.data()[yi] * xd.data()[xi]; });
  Conv2dWeightGrads out{gw.to(x.dtype()), Tensor()};
  if (with_bias) {
    const Shape& ys = gy.shape();
    Tensor gb = Tensor::zeros({ys[1]}, DType::f64);
    const int64_t plane = ys[2] * ys[3];
    for (int64_t i = 0; i < gy.numel(); ++i) gb.data<double>()[(i / plane) % ys[1]] += gyd.data()[i];
    out.bias = gb.to(x.dtype());
  }
  return out;
}

const ConvKernels kConv{
    // The reference loops read any layout.
    .conv2dInput = [](const Tensor& x) { return x; },
    .conv2dWeight = [](const Tensor& w, const Tensor&) { return w; },
    .conv2dForward = &conv2dForward,
    .conv2dBackwardData = &conv2dBackwardData,
    .conv2dBackwardWeights = &conv2dBackwardWeights,
};

}  // namespace lockstep::kernels::reference
