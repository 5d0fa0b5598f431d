// embedding, rmsNorm, gelu(approximate), silu, swiglu, split and rotary of ops/transformer.h
// (attention is in ops/attention.cpp).
#include "lockstep/autograd/ops/transformer.h"

#include <cmath>

#include "lockstep/autograd/autocast.h"
#include "lockstep/autograd/function.h"
#include "lockstep/autograd/ops/linear.h"
#include "lockstep/autograd/ops/math.h"
#include "lockstep/kernels/activation.h"
#include "lockstep/kernels/transformer.h"

namespace lockstep::autograd {

namespace {

class EmbeddingBackward final : public Node {
 public:
  EmbeddingBackward(Tensor indices, int64_t rows, int64_t padding_idx)
      : indices_(std::move(indices)), rows_(rows), padding_idx_(padding_idx) {}
  std::vector<Tensor> apply(const Tensor& g) override {
    return {kernels::embeddingBackward(g, indices_, rows_, padding_idx_)};
  }
  std::string name() const override { return "EmbeddingBackward"; }
  void releaseSaved() override { indices_ = Tensor(); }

 private:
  Tensor indices_;
  int64_t rows_, padding_idx_;
};

class RmsNormBackward final : public Node {
 public:
  RmsNormBackward(Tensor x, Tensor rstd, Tensor weight)
      : x_(std::move(x)), rstd_(std::move(rstd)), weight_(std::move(weight)) {}
  std::vector<Tensor> apply(const Tensor& g) override {
    auto r = kernels::rmsNormBackward(g, x_, rstd_, weight_);
    return {edges_[0] ? r.gx : Tensor(), edges_[1] ? r.gweight : Tensor()};
  }
  std::string name() const override { return "RmsNormBackward"; }
  void releaseSaved() override { x_ = rstd_ = weight_ = Tensor(); }

 private:
  Tensor x_, rstd_, weight_;
};

// Both activations take their derivative from the input.
class InputEltwiseBackward final : public Node {
 public:
  using Grad = Tensor (*)(const Tensor&, const Tensor&);
  InputEltwiseBackward(Tensor x, Grad grad, const char* name) : x_(std::move(x)), grad_(grad), name_(name) {}
  std::vector<Tensor> apply(const Tensor& g) override { return {grad_(g, x_)}; }
  std::string name() const override { return name_; }
  void releaseSaved() override { x_ = Tensor(); }

 private:
  Tensor x_;
  Grad grad_;
  const char* name_;
};

class SwigluBackward final : public Node {
 public:
  SwigluBackward(Tensor gate, Tensor up) : gate_(std::move(gate)), up_(std::move(up)) {}
  std::vector<Tensor> apply(const Tensor& g) override {
    auto [gg, gu] = kernels::swigluBackward(g, gate_, up_);
    return {gg, gu};
  }
  std::string name() const override { return "SwigluBackward"; }
  void releaseSaved() override { gate_ = up_ = Tensor(); }

 private:
  Tensor gate_, up_;
};

class RotaryBackward final : public Node {
 public:
  RotaryBackward(Tensor cos, Tensor sin) : cos_(std::move(cos)), sin_(std::move(sin)) {}
  std::vector<Tensor> apply(const Tensor& g) override { return {kernels::rotaryBackward(g, cos_, sin_)}; }
  std::string name() const override { return "RotaryBackward"; }
  void releaseSaved() override { cos_ = sin_ = Tensor(); }

 private:
  Tensor cos_, sin_;
};

}  // namespace

Variable embedding(const Variable& weight, const Tensor& indices, int64_t padding_idx) {
  LOCKSTEP_ENFORCE(weight.dim() == 2, ValueError, "embedding: weight must be [num_embeddings, dim], got ",
                   weight.tensor().describe());
  LOCKSTEP_ENFORCE(padding_idx == -1 || (padding_idx >= 0 && padding_idx < weight.size(0)), ValueError,
                   "embedding: padding_idx ", padding_idx, " is out of range for ", weight.size(0),
                   " embeddings (use -1 for none)");
  // Index tensors are often made on the host (arange, a batch): say so rather than fail in a kernel.
  LOCKSTEP_ENFORCE(indices.device() == weight.tensor().device(), ValueError, "embedding: the indices are on ",
                   deviceName(indices.device()), " but the weight is on ",
                   deviceName(weight.tensor().device()), "; move the indices there first");
  // Autocast: the gather runs in the weight's dtype (torch's embedding is not on a cast list).
  Tensor y = kernels::embeddingForward(weight.tensor(), indices);
  return record<EmbeddingBackward>(y, {&weight}, indices, weight.size(0), padding_idx);
}

Variable rmsNorm(const Variable& x0, const Variable& weight0, double eps) {
  const Variable x = autocast::fp32(x0), weight = autocast::fp32(weight0);
  auto out = kernels::rmsNormForward(x.tensor(), weight.tensor(), eps);
  return record<RmsNormBackward>(out.y, {&x, &weight}, x.tensor(), out.rstd, weight.tensor());
}

Variable gelu(const Variable& x, GeluApproximation approximate) {
  if (approximate == GeluApproximation::none) return gelu(x);
  Tensor y = kernels::geluTanhForward(x.tensor());
  return record<InputEltwiseBackward>(y, {&x}, x.tensor(), &kernels::geluTanhBackward, "GeluBackward");
}

Variable silu(const Variable& x) {
  Tensor y = kernels::siluForward(x.tensor());
  return record<InputEltwiseBackward>(y, {&x}, x.tensor(), &kernels::siluBackward, "SiluBackward");
}

Variable swiglu(const Variable& gate0, const Variable& up0) {
  auto [gate, up] = autocast::promote(gate0, up0);
  Tensor y = kernels::swigluForward(gate.tensor(), up.tensor());
  return record<SwigluBackward>(y, {&gate, &up}, gate.tensor(), up.tensor());
}

std::vector<Variable> split(const Variable& x, int64_t split_size, int64_t dim) {
  LOCKSTEP_ENFORCE(x.dim() >= 1, ValueError, "split: needs a tensor with >= 1 dim, got ",
                   x.tensor().describe());
  const int64_t d = normalizeDim(dim, x.dim(), "split: dim");
  const int64_t n = x.size(d);
  LOCKSTEP_ENFORCE(split_size > 0 || (split_size == 0 && n == 0), ValueError,
                   "split: split_size must be > 0, got ", split_size, " for dim ", d, " of size ", n);
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < n; start += split_size) sizes.push_back(std::min(split_size, n - start));
  if (sizes.empty()) sizes.push_back(0);  // torch returns the one empty piece
  return split(x, sizes, d);
}

std::vector<Variable> split(const Variable& x, const std::vector<int64_t>& sizes, int64_t dim) {
  LOCKSTEP_ENFORCE(x.dim() >= 1, ValueError, "split: needs a tensor with >= 1 dim, got ",
                   x.tensor().describe());
  const int64_t d = normalizeDim(dim, x.dim(), "split: dim");
  int64_t total = 0;
  for (int64_t s : sizes) {
    LOCKSTEP_ENFORCE(s >= 0, ValueError, "split: sizes must be >= 0, got ", s);
    total += s;
  }
  LOCKSTEP_ENFORCE(total == x.size(d), ValueError, "split: sizes sum to ", total, " but dim ", d, " of ",
                   shapeToString(x.shape()), " has ", x.size(d));
  // Each piece is a narrow view: no copy, as torch.split.
  std::vector<Variable> out;
  out.reserve(sizes.size());
  int64_t start = 0;
  for (int64_t s : sizes) {
    out.push_back(narrow(x, d, start, s));
    start += s;
  }
  return out;
}

Variable applyRotary(const Variable& x, const Tensor& cos, const Tensor& sin) {
  LOCKSTEP_ENFORCE(cos.device() == x.tensor().device() && sin.device() == x.tensor().device(), ValueError,
                   "applyRotary: cos (", deviceName(cos.device()), ") and sin (", deviceName(sin.device()),
                   ") must be on x's device (", deviceName(x.tensor().device()),
                   "); rotaryTables makes them on the host: move them with .to()");
  Tensor y = kernels::rotaryForward(x.tensor(), cos, sin);
  return record<RotaryBackward>(y, {&x}, cos, sin);
}

std::pair<Tensor, Tensor> rotaryTables(int64_t T, int64_t D, double theta, int64_t position_offset) {
  LOCKSTEP_ENFORCE(T >= 0 && D > 0 && D % 2 == 0, ValueError,
                   "rotaryTables: need T >= 0 and an even D > 0, got T=", T, " D=", D);
  LOCKSTEP_ENFORCE(theta > 0.0 && position_offset >= 0, ValueError, "rotaryTables: theta must be > 0 and ",
                   "position_offset >= 0, got theta=", theta, " position_offset=", position_offset);
  const int64_t h = D / 2;
  Tensor c = Tensor::empty({T, h}, DType::f32), s = Tensor::empty({T, h}, DType::f32);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < h; ++i) {
      // HF Llama: inv_freq = theta^(-2i/D), angle = position * inv_freq.
      const double inv_freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(D));
      const double a = static_cast<double>(t + position_offset) * inv_freq;
      c.data<float>()[t * h + i] = static_cast<float>(std::cos(a));
      s.data<float>()[t * h + i] = static_cast<float>(std::sin(a));
    }
  }
  return {c, s};
}

}  // namespace lockstep::autograd
