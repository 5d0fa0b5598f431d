// The cpu backend's f32 batch normalisation (see kernels/dispatch.h): two passes over the activation
// each way, with a ResNet block's residual add and relu in the same passes (kernels/batch_norm.h).
// oneDNN 2.6's forward read x at ~11 GB/s on ResNet-50's shapes and left the add and the relu to two
// more passes of their own.
//
// Layouts: channels_last (rows of C contiguous channels: ResNets on the CPU) and contiguous NCHW
// (planes of H x W); any other view is made one of them first. The statistics are sums in f64 over
// fixed blocks of rows (or whole planes), added in a fixed order: the result does not depend on the
// number of threads, and E[x^2] - E[x]^2 in f64 keeps f32 data's variance exact enough even where
// the mean is far from 0.
#include "lockstep/kernels/tables/batch_norm.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "lockstep/kernels/cpu/vector_math.h"
#include "lockstep/kernels/layout.h"

namespace lockstep::kernels::cpu {

namespace {

// ---- channels_last row loops: rows x C, channel c of row r at r * C + c --------------------------

LOCKSTEP_VECTOR_CLONES void sumRows(const float* __restrict x, int64_t rows, int64_t C, double* __restrict s,
                                    double* __restrict q) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      const double v = xr[c];
      s[c] += v;
      q[c] += v * v;
    }
  }
}

// y = (x - mean) * a + b (+ residual), then max(., 0) when relu.
LOCKSTEP_VECTOR_CLONES void normaliseRows(const float* __restrict x, const float* __restrict res,
                                          float* __restrict y, int64_t rows, int64_t C,
                                          const float* __restrict mean, const float* __restrict a,
                                          const float* __restrict b, bool relu) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * C;
    float* yr = y + r * C;
    if (res != nullptr) {
      const float* rr = res + r * C;
      if (relu) {
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) yr[c] = std::max((xr[c] - mean[c]) * a[c] + b[c] + rr[c], 0.0f);
      } else {
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - mean[c]) * a[c] + b[c] + rr[c];
      }
    } else if (relu) {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) yr[c] = std::max((xr[c] - mean[c]) * a[c] + b[c], 0.0f);
    } else {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - mean[c]) * a[c] + b[c];
    }
  }
}

// The relu's mask: g where the forward's output y is not <= 0 (positive or NaN, as torch's
// threshold_backward), else 0, as a bit mask (GCC 12 does not if-convert the ternary in the loops
// below that also sum in f64).
inline float where(float y, float g) {
  return std::bit_cast<float>(std::bit_cast<int32_t>(g) & -static_cast<int32_t>(!(y <= 0.0f)));
}

// sdy += g, sdyx += g * (x - mean) with g = dL/dy masked by the relu (when y is given), written to
// gres when given (dL/dresidual). One loop per case: GCC vectorises none with the tests inside.
LOCKSTEP_VECTOR_CLONES void gradSumRows(const float* __restrict gy, const float* __restrict y,
                                        const float* __restrict x, float* __restrict gres, int64_t rows,
                                        int64_t C, const float* __restrict mean, double* __restrict sdy,
                                        double* __restrict sdyx) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t o = r * C;
    const float *gr = gy + o, *xr = x + o;
    if (y != nullptr && gres != nullptr) {
      const float* yr = y + o;
      float* wr = gres + o;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) {
        const float g = where(yr[c], gr[c]);
        wr[c] = g;
        sdy[c] += g;
        sdyx[c] += static_cast<double>(g) * static_cast<double>(xr[c] - mean[c]);
      }
    } else if (y != nullptr) {
      const float* yr = y + o;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) {
        const float g = where(yr[c], gr[c]);
        sdy[c] += g;
        sdyx[c] += static_cast<double>(g) * static_cast<double>(xr[c] - mean[c]);
      }
    } else {
      if (gres != nullptr) std::copy(gr, gr + C, gres + o);
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) {
        sdy[c] += gr[c];
        sdyx[c] += static_cast<double>(gr[c]) * static_cast<double>(xr[c] - mean[c]);
      }
    }
  }
}

// dL/dx = a g + k (x - mean) + d, g masked by the relu when y is given (the caller hands the masked
// gradient itself, and no y, where it wrote one).
LOCKSTEP_VECTOR_CLONES void gradRows(const float* __restrict gy, const float* __restrict y,
                                     const float* __restrict x, float* __restrict gx, int64_t rows, int64_t C,
                                     const float* __restrict mean, const float* __restrict a,
                                     const float* __restrict k, const float* __restrict d) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t o = r * C;
    if (y != nullptr) {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) {
        const float g = where(y[o + c], gy[o + c]);
        gx[o + c] = a[c] * g + k[c] * (x[o + c] - mean[c]) + d[c];
      }
    } else {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) gx[o + c] = a[c] * gy[o + c] + k[c] * (x[o + c] - mean[c]) + d[c];
    }
  }
}

// ---- NCHW plane loops: n planes of one channel each, p contiguous elements ------------------------

LOCKSTEP_VECTOR_CLONES void sumPlane(const float* __restrict x, int64_t p, double& s, double& q) {
  double ss = 0.0, qq = 0.0;
#pragma omp simd reduction(+ : ss, qq)
  for (int64_t i = 0; i < p; ++i) {
    const double v = x[i];
    ss += v;
    qq += v * v;
  }
  s += ss;
  q += qq;
}

LOCKSTEP_VECTOR_CLONES void normalisePlane(const float* __restrict x, const float* __restrict res,
                                           float* __restrict y, int64_t p, float mean, float a, float b,
                                           bool relu) {
  if (res != nullptr && relu) {
#pragma omp simd
    for (int64_t i = 0; i < p; ++i) y[i] = std::max((x[i] - mean) * a + b + res[i], 0.0f);
  } else if (res != nullptr) {
#pragma omp simd
    for (int64_t i = 0; i < p; ++i) y[i] = (x[i] - mean) * a + b + res[i];
  } else if (relu) {
#pragma omp simd
    for (int64_t i = 0; i < p; ++i) y[i] = std::max((x[i] - mean) * a + b, 0.0f);
  } else {
#pragma omp simd
    for (int64_t i = 0; i < p; ++i) y[i] = (x[i] - mean) * a + b;
  }
}

// dL/dy masked by the relu where y is given, into g (p values).
void maskedInto(const float* __restrict gy, const float* __restrict y, float* __restrict g, int64_t p) {
#pragma omp simd
  for (int64_t i = 0; i < p; ++i) g[i] = where(y[i], gy[i]);
}

LOCKSTEP_VECTOR_CLONES void gradSumPlane(const float* __restrict g, const float* __restrict x, int64_t p,
                                         float mean, double& sdy, double& sdyx) {
  double s = 0.0, sx = 0.0;
#pragma omp simd reduction(+ : s, sx)
  for (int64_t i = 0; i < p; ++i) {
    s += g[i];
    sx += static_cast<double>(g[i]) * static_cast<double>(x[i] - mean);
  }
  sdy += s;
  sdyx += sx;
}

LOCKSTEP_VECTOR_CLONES void gradPlane(const float* __restrict g, const float* __restrict x,
                                      float* __restrict gx, int64_t p, float mean, float a, float k,
                                      float d) {
#pragma omp simd
  for (int64_t i = 0; i < p; ++i) gx[i] = a * g[i] + k * (x[i] - mean) + d;
}

// ---- shared ----------------------------------------------------------------------------------------

// The activation as the loops read it: dense in x's format (channels_last or contiguous NCHW).
struct Layout {
  MemoryFormat format;
  int64_t N, C, plane;  // plane = H * W
  int64_t rows() const { return N * plane; }
  bool channelsLast() const { return format == MemoryFormat::channels_last; }
};

Layout layoutOf(const Tensor& x) { return {formatOf(x), x.size(0), x.size(1), x.size(2) * x.size(3)}; }

// A tensor in layout l's format (dL/dy, y and the residual may come in another layout).
Tensor like(const Tensor& t, const Layout& l) {
  if (!t.defined()) return t;
  return inFormat(t, l.format);
}

const float* ptr(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

// Blocks of rows for the channels_last sums: a count that depends on the shape alone (never on the
// threads), so the sums' order, and the result, are the same with any number of threads.
constexpr int64_t kMaxBlocks = 64;
int64_t rowsPerBlock(int64_t rows) { return std::max<int64_t>(16, (rows + kMaxBlocks - 1) / kMaxBlocks); }

// Per-channel sums of two quantities over the whole activation, in f64 and a fixed order:
// rowSums(first_row, rows, s, q) adds a block's rows (channels_last), planeSums(n, c, s, q) one plane.
template <typename RowSums, typename PlaneSums>
void channelSums(const Layout& l, std::vector<double>& s, std::vector<double>& q, RowSums rowSums,
                 PlaneSums planeSums) {
  const int64_t C = l.C;
  s.assign(C, 0.0);
  q.assign(C, 0.0);
  if (l.channelsLast()) {
    const int64_t rows = l.rows(), per = rowsPerBlock(rows), blocks = (rows + per - 1) / per;
    std::vector<double> part(static_cast<size_t>(2 * blocks * C), 0.0);
#pragma omp parallel for schedule(static) if (rows * C > 32768)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t r0 = b * per;
      rowSums(r0, std::min(per, rows - r0), part.data() + 2 * b * C, part.data() + (2 * b + 1) * C);
    }
    for (int64_t b = 0; b < blocks; ++b) {
      for (int64_t c = 0; c < C; ++c) {
        s[c] += part[2 * b * C + c];
        q[c] += part[(2 * b + 1) * C + c];
      }
    }
  } else {
#pragma omp parallel for schedule(static) if (l.rows() * C > 32768)
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t n = 0; n < l.N; ++n) planeSums(n, c, s[c], q[c]);
    }
  }
}

// fn(first_row, rows) over blocks of channels_last rows, or fn(n, c) over NCHW planes, in parallel.
template <typename RowFn, typename PlaneFn>
void forEachBlock(const Layout& l, RowFn rowFn, PlaneFn planeFn) {
  if (l.channelsLast()) {
    const int64_t rows = l.rows(), per = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, l.C));
#pragma omp parallel for schedule(static) if (rows * l.C > 32768)
    for (int64_t r0 = 0; r0 < rows; r0 += per) rowFn(r0, std::min(per, rows - r0));
  } else {
#pragma omp parallel for schedule(static) collapse(2) if (l.rows() * l.C > 32768)
    for (int64_t n = 0; n < l.N; ++n)
      for (int64_t c = 0; c < l.C; ++c) planeFn(n, c);
  }
}

std::vector<double> vectorOr(const Tensor& t, int64_t n, double value) {
  return t.defined() ? t.toVector<double>() : std::vector<double>(static_cast<size_t>(n), value);
}

// [C] f32 from per-channel f64 values.
Tensor f32Vector(const std::vector<double>& v) {
  return Tensor::fromVector<double>(v, {static_cast<int64_t>(v.size())}).to(DType::f32);
}

std::vector<float> narrowed(const std::vector<double>& v) { return {v.begin(), v.end()}; }

}  // namespace

BatchNormResult batchNorm2dForward(const Tensor& x0, const Tensor& weight, const Tensor& bias,
                                   const Tensor& running_mean, const Tensor& running_var,
                                   const Tensor& residual0, const BatchNormParams& p) {
  const Layout l = layoutOf(x0);
  const Tensor x = like(x0, l), residual = like(residual0, l);
  const int64_t C = l.C, count = l.rows();
  BatchNormResult r{Tensor::empty(x.shape(), DType::f32, l.format), Tensor(), Tensor()};
  std::vector<double> mean, var;
  if (p.training) {
    const float* px = x.data<float>();
    std::vector<double> s, q;
    channelSums(
        l, s, q,
        [&](int64_t r0, int64_t rows, double* bs, double* bq) { sumRows(px + r0 * C, rows, C, bs, bq); },
        [&](int64_t n, int64_t c, double& ps, double& pq) {
          sumPlane(px + (n * C + c) * l.plane, l.plane, ps, pq);
        });
    mean.resize(C);
    var.resize(C);
    for (int64_t c = 0; c < C; ++c) {
      mean[c] = count > 0 ? s[c] / double(count) : 0.0;
      // Rounding can take a constant channel's variance below 0; a NaN (from a non-finite x) stays.
      const double v = count > 0 ? q[c] / double(count) - mean[c] * mean[c] : 0.0;
      var[c] = v < 0.0 ? 0.0 : v;
    }
  } else {
    mean = running_mean.toVector<double>();
    var = running_var.toVector<double>();
  }
  r.mean = f32Vector(mean);
  r.var = f32Vector(var);
  if (x.numel() == 0) return r;
  const std::vector<double> w = vectorOr(weight, C, 1.0), b = vectorOr(bias, C, 0.0);
  std::vector<float> a(C), shift(C);
  for (int64_t c = 0; c < C; ++c) {
    a[c] = static_cast<float>(w[c] / std::sqrt(var[c] + p.eps));
    shift[c] = static_cast<float>(b[c]);
  }
  const std::vector<float> m = narrowed(mean);
  const float *px = x.data<float>(), *pr = ptr(residual);
  float* py = r.y.data<float>();
  forEachBlock(
      l,
      [&](int64_t r0, int64_t rows) {
        normaliseRows(px + r0 * C, pr ? pr + r0 * C : nullptr, py + r0 * C, rows, C, m.data(), a.data(),
                      shift.data(), p.relu);
      },
      [&](int64_t n, int64_t c) {
        const int64_t o = (n * C + c) * l.plane;
        normalisePlane(px + o, pr ? pr + o : nullptr, py + o, l.plane, m[c], a[c], shift[c], p.relu);
      });
  return r;
}

BatchNormGrads batchNorm2dBackward(const Tensor& gy0, const Tensor& x0, const Tensor& weight, bool with_bias,
                                   const Tensor& mean_t, const Tensor& var_t, const Tensor& y0,
                                   bool with_residual, const BatchNormParams& p) {
  const Layout l = layoutOf(x0);
  const Tensor x = like(x0, l), gy = like(gy0, l), y = p.relu ? like(y0, l) : Tensor();
  const int64_t C = l.C, count = l.rows();
  BatchNormGrads g;
  g.x = Tensor::empty(x.shape(), DType::f32, l.format);
  if (with_residual) g.residual = Tensor::empty(x.shape(), DType::f32, l.format);
  const std::vector<double> mean = mean_t.toVector<double>(), var = var_t.toVector<double>(),
                            w = vectorOr(weight, C, 1.0);
  const std::vector<float> m = narrowed(mean);
  const float *px = x.data<float>(), *pg = gy.data<float>(), *py = ptr(y);
  float* pgx = g.x.data<float>();
  // The masked dL/dy, written out by pass 1: dL/dresidual when asked for, and for NCHW planes with a
  // relu (their loops read it instead of masking).
  Tensor masked_gy;
  if (!with_residual && p.relu && !l.channelsLast())
    masked_gy = Tensor::empty(x.shape(), DType::f32, l.format);
  float* gout = with_residual         ? g.residual.data<float>()
                : masked_gy.defined() ? masked_gy.data<float>()
                                      : nullptr;
  // Pass 1: sum(g) and sum(g (x - mean)) per channel.
  std::vector<double> sdy, sdyx;
  channelSums(
      l, sdy, sdyx,
      [&](int64_t r0, int64_t rows, double* s, double* sx) {
        const int64_t o = r0 * C;
        gradSumRows(pg + o, py ? py + o : nullptr, px + o, gout ? gout + o : nullptr, rows, C, m.data(), s,
                    sx);
      },
      [&](int64_t n, int64_t c, double& s, double& sx) {
        const int64_t o = (n * C + c) * l.plane;
        const float* src = pg + o;
        if (py != nullptr) {
          maskedInto(pg + o, py + o, gout + o, l.plane);
          src = gout + o;
        } else if (gout != nullptr) {
          std::copy(pg + o, pg + o + l.plane, gout + o);
        }
        gradSumPlane(src, px + o, l.plane, m[c], s, sx);
      });
  // Pass 2: dL/dx = a g + k (x - mean) + d. Training: w invstd (g - mean(g) - xhat mean(g xhat)),
  // the batch statistics' own dependence on x included; eval: w invstd g.
  std::vector<float> a(C), k(C), d(C);
  for (int64_t c = 0; c < C; ++c) {
    const double invstd = 1.0 / std::sqrt(var[c] + p.eps), wi = w[c] * invstd;
    a[c] = static_cast<float>(wi);
    k[c] =
        p.training && count > 0 ? static_cast<float>(-wi * invstd * invstd * sdyx[c] / double(count)) : 0.0f;
    d[c] = p.training && count > 0 ? static_cast<float>(-wi * sdy[c] / double(count)) : 0.0f;
  }
  // Where pass 1 wrote the masked gradient, pass 2 reads it instead of masking again.
  const float* gsrc = gout ? gout : pg;
  const float* mask = gout ? nullptr : py;
  forEachBlock(
      l,
      [&](int64_t r0, int64_t rows) {
        const int64_t o = r0 * C;
        gradRows(gsrc + o, mask ? mask + o : nullptr, px + o, pgx + o, rows, C, m.data(), a.data(), k.data(),
                 d.data());
      },
      [&](int64_t n, int64_t c) {
        const int64_t o = (n * C + c) * l.plane;
        gradPlane(gsrc + o, px + o, pgx + o, l.plane, m[c], a[c], k[c], d[c]);
      });
  if (weight.defined()) {
    std::vector<double> gw(C);
    for (int64_t c = 0; c < C; ++c) gw[c] = sdyx[c] / std::sqrt(var[c] + p.eps);
    g.weight = f32Vector(gw).to(weight.dtype());
  }
  if (with_bias) g.bias = f32Vector(sdy);
  return g;
}

const BatchNormKernels kBatchNorm{LOCKSTEP_BATCH_NORM_OPS(LOCKSTEP_KERNEL_ENTRY)};

}  // namespace lockstep::kernels::cpu
