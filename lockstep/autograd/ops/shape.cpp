// View ops (reshape, flatten, transpose, permute, narrow, split) and concat of ops/shape.h. Views
// share the input's storage; their backward maps the gradient back the same way, mostly as views too.
#include "lockstep/autograd/ops/shape.h"

#include "lockstep/autograd/function.h"
#include "lockstep/kernels/accumulate.h"
#include "lockstep/kernels/shape.h"

namespace lockstep::autograd {

namespace {

class ReshapeBackward final : public Node {
 public:
  explicit ReshapeBackward(Shape input) : input_(std::move(input)) {}
  std::vector<Tensor> apply(const Tensor& g) override { return {g.reshape(input_)}; }
  std::string name() const override { return "ReshapeBackward"; }

 private:
  Shape input_;
};

class PermuteBackward final : public Node {
 public:
  // inverse[dims[i]] = i, so permuting the gradient by inverse undoes the forward permutation.
  explicit PermuteBackward(Shape inverse) : inverse_(std::move(inverse)) {}
  std::vector<Tensor> apply(const Tensor& g) override { return {g.permute(inverse_)}; }
  std::string name() const override { return "PermuteBackward"; }

 private:
  Shape inverse_;
};

class NarrowBackward final : public Node {
 public:
  NarrowBackward(Shape input, int64_t dim, int64_t start)
      : input_(std::move(input)), dim_(dim), start_(start) {}
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor gx = Tensor::zeros(input_, g.dtype(), g.device());
    gx.narrow(dim_, start_, g.size(dim_)).copyFrom(g);
    return {gx};
  }
  // The pieces of a split: the first piece's backward writes the zero-padded gradient, each later
  // one adds into its own slice of it (the engine would add a whole zero-padded tensor per piece).
  std::vector<Tensor> applyInto(const Tensor& g, const std::vector<Tensor*>& into) override {
    Tensor* gx = held(into, 0);
    if (!gx || gx->shape() != input_ || gx->device() != g.device()) return apply(g);
    Tensor slice = gx->narrow(dim_, start_, g.size(dim_));
    kernels::addInto(slice, g);
    return {Tensor()};
  }
  bool accumulates() const override { return true; }
  std::string name() const override { return "NarrowBackward"; }

 private:
  Shape input_;
  int64_t dim_, start_;
};

class ConcatBackward final : public Node {
 public:
  ConcatBackward(int64_t dim, std::vector<int64_t> sizes) : dim_(dim), sizes_(std::move(sizes)) {}
  std::vector<Tensor> apply(const Tensor& g) override {
    std::vector<Tensor> grads(sizes_.size());
    int64_t start = 0;
    for (size_t i = 0; i < sizes_.size(); ++i) {
      if (edges_[i]) grads[i] = g.narrow(dim_, start, sizes_[i]);
      start += sizes_[i];
    }
    return grads;
  }
  std::string name() const override { return "ConcatBackward"; }

 private:
  int64_t dim_;
  std::vector<int64_t> sizes_;
};

}  // namespace

Variable reshape(const Variable& x, const Shape& shape) {
  return record<ReshapeBackward>(x.tensor().reshape(shape), {&x}, x.shape());
}

Variable flatten(const Variable& x, int64_t start_dim, int64_t end_dim) {
  return record<ReshapeBackward>(x.tensor().flatten(start_dim, end_dim), {&x}, x.shape());
}

Variable transpose(const Variable& x, int64_t d0, int64_t d1) {
  if (x.dim() == 0) {
    // PyTorch allows transpose(0, 0) (or -1) of a 0-d tensor: nothing moves.
    normalizeDim(d0, 0, "transpose: dim");
    normalizeDim(d1, 0, "transpose: dim");
    return record<ReshapeBackward>(x.tensor(), {&x}, x.shape());
  }
  // A transpose is its own inverse permutation.
  Shape inverse(static_cast<size_t>(x.dim()));
  for (int64_t i = 0; i < x.dim(); ++i) inverse[i] = i;
  Tensor y = x.tensor().transpose(d0, d1);
  std::swap(inverse[normalizeDim(d0, x.dim())], inverse[normalizeDim(d1, x.dim())]);
  return record<PermuteBackward>(y, {&x}, inverse);
}

Variable permute(const Variable& x, const Shape& dims) {
  Tensor y = x.tensor().permute(dims);  // validates dims
  Shape inverse(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) inverse[normalizeDim(dims[i], x.dim())] = static_cast<int64_t>(i);
  return record<PermuteBackward>(y, {&x}, inverse);
}

Variable narrow(const Variable& x, int64_t dim, int64_t start, int64_t length) {
  Tensor y = x.tensor().narrow(dim, start, length);  // validates the range
  return record<NarrowBackward>(y, {&x}, x.shape(), normalizeDim(dim, x.dim()), start);
}

Variable concat(const std::vector<Variable>& xs, int64_t dim) {
  std::vector<Tensor> ts;
  ts.reserve(xs.size());
  for (const Variable& v : xs) ts.push_back(v.tensor());
  Tensor y = kernels::concat(ts, dim);
  bool needs = false;
  if (isGradEnabled()) {
    for (const Variable& v : xs) needs = needs || v.requiresGrad();
  }
  if (!needs) return Variable::makeResult(y, nullptr);
  const int64_t d = normalizeDim(dim, y.dim());
  std::vector<int64_t> sizes;
  for (const Variable& v : xs) sizes.push_back(v.size(d));
  auto node = std::make_shared<ConcatBackward>(d, std::move(sizes));
  for (const Variable& v : xs) node->edges().push_back(v.gradEdge());
  return Variable::makeResult(y, std::move(node));
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

}  // namespace lockstep::autograd
