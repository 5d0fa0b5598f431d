#include "lockstep/kernels/transformer.h"

#include <cmath>

#include "lockstep/kernels/dispatch.h"
#include "lockstep/kernels/tables/transformer.h"

namespace lockstep::kernels {

namespace {

const Backends<TransformerKernels> kBackends{.cpu = &cpu::kTransformer,
                                             .reference = &reference::kTransformer,
                                             .cuda = LOCKSTEP_CUDA_TABLE(cuda::kTransformer)};

void checkEmbedding(const Tensor& weight, const Tensor& indices) {
  LOCKSTEP_ENFORCE(weight.dim() == 2, ValueError, "embedding: weight must be [num_embeddings, dim], got ",
                   weight.describe());
  LOCKSTEP_ENFORCE(indices.dtype() == DType::i64, ValueError, "embedding: indices must be i64, got ",
                   indices.describe());
}

void checkIndices(const Tensor& weight, const Tensor& indices) {
  Tensor ix = indices.contiguous();
  const int64_t* p = ix.data<int64_t>();
  const int64_t v = weight.size(0);
  for (int64_t i = 0; i < ix.numel(); ++i) {
    LOCKSTEP_ENFORCE(p[i] >= 0 && p[i] < v, IndexError, "embedding: index ", p[i], " at position ", i,
                     " (row-major in indices ", shapeToString(indices.shape()), ") is out of range for ", v,
                     " embeddings");
  }
}

int64_t lastDim(const Tensor& x) { return x.dim() == 0 ? 1 : x.size(x.dim() - 1); }

void checkRmsNorm(const Tensor& x, const Tensor& weight) {
  LOCKSTEP_ENFORCE(x.dim() >= 1 && isFloating(x.dtype()), ValueError,
                   "rms_norm: input must be floating with >= 1 dim, got ", x.describe());
  if (weight.defined()) {
    LOCKSTEP_ENFORCE(weight.dim() == 1 && weight.size(0) == lastDim(x) && weight.dtype() == x.dtype(),
                     ValueError, "rms_norm: weight ", weight.describe(), " does not fit input ", x.describe(),
                     " (needs [", lastDim(x), "] of the input's dtype)");
  }
}

void checkSame(const char* op, const Tensor& a, const Tensor& b) {
  LOCKSTEP_ENFORCE(a.shape() == b.shape() && a.dtype() == b.dtype() && isFloating(a.dtype()), ValueError, op,
                   ": operands must be floating tensors of one shape and dtype, got ", a.describe(), " and ",
                   b.describe());
}

void checkRotary(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  LOCKSTEP_ENFORCE(x.dim() >= 2 && isFloating(x.dtype()), ValueError,
                   "rotary: input must be floating [..., T, D], got ", x.describe());
  const int64_t t = x.size(x.dim() - 2), d = x.size(x.dim() - 1);
  LOCKSTEP_ENFORCE(d % 2 == 0, ValueError, "rotary: head dim ", d, " of ", x.describe(), " must be even");
  const Shape want{t, d / 2};
  LOCKSTEP_ENFORCE(
      cos.shape() == want && sin.shape() == want && isFloating(cos.dtype()) && isFloating(sin.dtype()),
      ValueError, "rotary: cos ", cos.describe(), " and sin ", sin.describe(), " must be floating ",
      shapeToString(want), " for input ", x.describe());
}

}  // namespace

Tensor embeddingForward(const Tensor& weight, const Tensor& indices) {
  checkEmbedding(weight, indices);
  const bool on_gpu = weight.isCuda() || indices.isCuda();
  if (!on_gpu) checkIndices(weight, indices);
  // A gather of whole rows: no arithmetic, so every dtype takes the same path.
  return dispatchAsIs<&TransformerKernels::embeddingForward>(kBackends, {on_gpu, weight.dtype()}, weight,
                                                             indices);
}

Tensor embeddingBackward(const Tensor& gy, const Tensor& indices, int64_t num_rows, int64_t padding_idx) {
  LOCKSTEP_ENFORCE(gy.dim() == indices.dim() + 1 && isFloating(gy.dtype()), ValueError,
                   "embedding backward: gradient ", gy.describe(), " does not fit indices ",
                   indices.describe());
  return dispatch<&TransformerKernels::embeddingBackward>(
      kBackends, {gy.isCuda() || indices.isCuda(), gy.dtype()}, gy, indices, num_rows, padding_idx);
}

RmsNormOutput rmsNormForward(const Tensor& x, const Tensor& weight, double eps,
                             std::optional<DType> y_dtype) {
  checkRmsNorm(x, weight);
  const DType yt = y_dtype.value_or(x.dtype());
  LOCKSTEP_ENFORCE(isFloating(yt), ValueError, "rms_norm: the output dtype must be floating, got ",
                   dtypeName(yt));
  RmsNormOutput r = dispatch<&TransformerKernels::rmsNormForward>(kBackends, x, x, weight, eps, yt);
  if (r.y.dtype() != yt) r.y = r.y.to(yt);  // a backend that writes x's dtype only
  return r;
}

void checkRmsNormBackward(const Tensor& gy, const Tensor& x, const Tensor& weight) {
  checkRmsNorm(x, weight);
  LOCKSTEP_ENFORCE(gy.shape() == x.shape(), ValueError, "rms_norm backward: gradient ", gy.describe(),
                   " does not match input ", x.describe());
  LOCKSTEP_ENFORCE(isFloating(gy.dtype()), ValueError, "rms_norm backward: gradient ", gy.describe(),
                   " is not floating");
}

RmsNormGrads rmsNormBackward(const Tensor& gy, const Tensor& x, const Tensor& rstd, const Tensor& weight) {
  checkRmsNormBackward(gy, x, weight);
  // The CPU kernels take gy in x's dtype; a GPU reads it as it is.
  const Tensor g = gy.dtype() == x.dtype() || x.isCuda() ? gy : gy.to(x.dtype());
  return dispatch<&TransformerKernels::rmsNormBackward>(kBackends, x, g, x, rstd, weight);
}

Tensor swigluForward(const Tensor& gate, const Tensor& up) {
  checkSame("swiglu", gate, up);
  return dispatch<&TransformerKernels::swigluForward>(kBackends, gate, gate, up);
}

std::pair<Tensor, Tensor> swigluBackward(const Tensor& gy, const Tensor& gate, const Tensor& up) {
  checkSame("swiglu", gate, up);
  checkSame("swiglu backward", gy, gate);
  return dispatch<&TransformerKernels::swigluBackward>(kBackends, gate, gy, gate, up);
}

Tensor rotaryForward(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  checkRotary(x, cos, sin);
  return dispatch<&TransformerKernels::rotaryForward>(kBackends, x, x, cos, sin);
}

Tensor rotaryBackward(const Tensor& gy, const Tensor& cos, const Tensor& sin) {
  checkRotary(gy, cos, sin);
  return dispatch<&TransformerKernels::rotaryBackward>(kBackends, gy, gy, cos, sin);
}

std::pair<Tensor, Tensor> rotaryTables(int64_t T, int64_t D, double theta, int64_t position_offset) {
  LOCKSTEP_ENFORCE(T >= 0 && D > 0 && D % 2 == 0, ValueError,
                   "rotaryTables: need T >= 0 and an even D > 0, got T=", T, " D=", D);
  LOCKSTEP_ENFORCE(theta > 0.0 && position_offset >= 0, ValueError, "rotaryTables: theta must be > 0 and ",
                   "position_offset >= 0, got theta=", theta, " position_offset=", position_offset);
  const int64_t h = D / 2;
  Tensor c = Tensor::empty({T, h}, DType::f32), s = Tensor::empty({T, h}, DType::f32);
  float* cp = c.data<float>();
  float* sp = s.data<float>();
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < h; ++i) {
      const double inv_freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(D));
      const double a = static_cast<double>(t + position_offset) * inv_freq;
      cp[t * h + i] = static_cast<float>(std::cos(a));
      sp[t * h + i] = static_cast<float>(std::sin(a));
    }
  }
  return {c, s};
}

}  // namespace lockstep::kernels
