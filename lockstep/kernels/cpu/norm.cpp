// The cpu backend's gradient norms and clipping: host loops, sums in f64 (see kernels/dispatch.h).
#include "lockstep/kernels/norm.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "lockstep/kernels/cpu/chunks.h"
#include "lockstep/kernels/cpu/vector_math.h"
#include "lockstep/kernels/tables/norm.h"
#include "lockstep/kernels/tables/scale.h"
#include "lockstep/tensor/convert.h"
#include "lockstep/util/error.h"

namespace lockstep::kernels::cpu {

namespace {

// The norms read x where it is, in its own dtype (no f64 copy), in fixed chunks of kChunk elements:
// each chunk's sum of |x|^p in kLanes interleaved f64 accumulators (element i goes to lane i %
// kLanes, the lanes added pairwise at the end), then the chunks' sums in chunk order. The order is
// fixed by the size alone, so for p = 2 and infinity the answer is the same on every CPU (the loops'
// clones of any width compute the same lanes: no FMA, this file is compiled with -ffp-contract=off)
// and with any number of threads, which take whole chunks. (Other p call the C library's pow.)
constexpr int64_t kChunk = 65536;
constexpr int kLanes = 8;

enum class Power { two, inf, general };

// x[0, n) into the lanes, element i into lane i % kLanes: the sum of |x|^p, or for p = infinity the
// largest |x|, NaN once any |x| is (as torch's inf-norm, which clip_grad_norm_ then reports).
template <Power P, typename T>
LOCKSTEP_VECTOR_CLONES_TEMPLATE void accumulateLanes(const T* __restrict x, int64_t n, double p,
                                                     double* __restrict lane) {
  auto add = [&](int j, double v) {
    if constexpr (P == Power::two) {
      lane[j] += v * v;
    } else if constexpr (P == Power::inf) {
      const double a = std::abs(v);
      lane[j] = lane[j] < a || a != a ? a : lane[j];
    } else {
      lane[j] += std::pow(std::abs(v), p);
    }
  };
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) add(j, static_cast<double>(x[i + j]));
  for (int j = 0; i < n; ++i, ++j) add(j, static_cast<double>(x[i]));
}

template <Power P>
double joinLanes(const double* lane) {
  auto join = [](double a, double c) {
    if constexpr (P == Power::inf)
      return a < c || c != c ? c : a;
    else
      return a + c;
  };
  return join(join(join(lane[0], lane[1]), join(lane[2], lane[3])),
              join(join(lane[4], lane[5]), join(lane[6], lane[7])));
}

// Chunk [b, e) of x (T: float, double, or the bits of bf16 / f16, widened to f32 a block at a time:
// exactly, and in blocks of a multiple of kLanes, so each element keeps its lane).
template <Power P, typename T>
double chunkPower(const T* x, int64_t b, int64_t e, double p, const Convert16* convert) {
  double lane[kLanes] = {};
  if constexpr (std::is_same_v<T, uint16_t>) {
    constexpr int64_t kBlock = 2048;
    float wide[kBlock];
    for (int64_t i = b; i < e; i += kBlock) {
      const int64_t m = std::min(kBlock, e - i);
      convert->widen(x + i, wide, m);
      accumulateLanes<P>(static_cast<const float*>(wide), m, p, lane);
    }
  } else {
    accumulateLanes<P>(x + b, e - b, p, lane);
  }
  return joinLanes<P>(lane);
}

template <Power P, typename T>
double densePower(const T* x, int64_t n, double p, const Convert16* convert) {
  std::vector<double> part(static_cast<size_t>((n + kChunk - 1) / kChunk));
  forEachChunk(n, kChunk, [&](int64_t c, int64_t b, int64_t e) {
    part[static_cast<size_t>(c)] = chunkPower<P>(x, b, e, p, convert);
  });
  double total = 0.0;
  for (double v : part) total = P == Power::inf ? (total < v || v != v ? v : total) : total + v;
  return total;
}

template <typename T>
double denseNorm(const T* x, int64_t n, double p, const Convert16* convert = nullptr) {
  if (std::isinf(p)) return densePower<Power::inf>(x, n, p, convert);
  if (p == 2.0) return std::sqrt(densePower<Power::two>(x, n, p, convert));
  return std::pow(densePower<Power::general>(x, n, p, convert), 1.0 / p);
}

double normOnHost(const Tensor& g, double p) {
  // In element order: read in place when contiguous, else from a contiguous copy in its dtype.
  const Tensor c = g.contiguous();
  const int64_t n = c.numel();
  switch (c.dtype()) {
    case DType::f32:
      return denseNorm(c.data<float>(), n, p);
    case DType::f64:
      return denseNorm(c.data<double>(), n, p);
    case DType::bf16:
    case DType::f16: {
      const Convert16 convert = convert16(c.dtype() == DType::bf16);
      return denseNorm(static_cast<const uint16_t*>(c.dataPtr()), n, p, &convert);
    }
    default:
      throw NotSupportedError(
          ::lockstep::detail::concat("norm supports floating tensors, got ", dtypeName(c.dtype())));
  }
}

// The clip coefficient as clipGradNorm has always computed it; NaN propagates, as in PyTorch.
double clipCoefficient(double total, double max_norm) {
  const double raw = max_norm / (total + 1e-6);
  return std::isnan(raw) ? raw : std::min(1.0, raw);
}

void scaleOnHost(Tensor g, double coef) {
  LOCKSTEP_ENFORCE(isFloating(g.dtype()), NotSupportedError, "clipGradNorm supports floating gradients, got ",
                   dtypeName(g.dtype()));
  // The cpu backend's scaling (kernels/cpu/scale.cpp): f32 and f64 in their dtype; bf16 and f16, as
  // the GPU's kernel, widened to f32, times float(coef), rounded once (ZeRO's bf16 master weights in
  // bf16 clip their bf16 gradients).
  if (g.isDense()) {
    kScale.scaleInPlace(g, coef);
  } else if (g.dtype() == DType::bf16 || g.dtype() == DType::f16) {
    Tensor wide = g.to(DType::f32).contiguous();
    kScale.scaleInPlace(wide, coef);
    g.copyFrom(wide);
  } else {
    Tensor scaled = g.to(DType::f64).contiguous();
    double* x = scaled.data<double>();
    for (int64_t i = 0; i < scaled.numel(); ++i) x[i] *= coef;
    g.copyFrom(scaled);
  }
}

Tensor totalNorm(const std::vector<Tensor>& xs, double p) {
  std::vector<double> norms;
  norms.reserve(xs.size());
  for (const Tensor& x : xs) norms.push_back(normOnHost(x, p));
  return Tensor::scalar(combineNorms(norms, p), DType::f64);
}

void scaleByClipCoefficient(const std::vector<Tensor>& xs, const Tensor& total, double max_norm) {
  const double coef = clipCoefficient(total.item<double>(), max_norm);
  if (coef == 1.0) return;  // multiplying by 1 changes nothing
  for (const Tensor& x : xs) scaleOnHost(x, coef);
}

}  // namespace

const NormKernels kNorm{
    .norm = &normOnHost, .totalNorm = &totalNorm, .scaleByClipCoefficient = &scaleByClipCoefficient};

}  // namespace lockstep::kernels::cpu
