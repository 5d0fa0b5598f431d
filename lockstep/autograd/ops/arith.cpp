// Element-wise arithmetic of ops/arith.h: broadcasting binary ops, scalar ops and unary math.
// Broadcast gradients are folded back onto each operand's shape with kernels::sumToShape.
#include "lockstep/autograd/ops/arith.h"

#include <cctype>

#include "lockstep/autograd/autocast.h"
#include "lockstep/autograd/function.h"
#include "lockstep/kernels/binary.h"
#include "lockstep/kernels/reduce.h"
#include "lockstep/kernels/unary.h"

namespace lockstep::autograd {

namespace {

using kernels::BinaryOp;
using kernels::UnaryOp;

// An edge that is null needs no gradient: skip its (possibly costly) reduction.
bool wants(const Node& n, size_t i) { return n.edges().size() > i && n.edges()[i] != nullptr; }

// Operands of two floating dtypes (the result has the wider) get their gradients in their own dtype,
// as a cast's backward would give them.
class AddSubBackward final : public Node {
 public:
  AddSubBackward(bool subtract, const Variable& a, const Variable& b)
      : subtract_(subtract), a_(a.shape()), b_(b.shape()), a_dtype_(a.dtype()), b_dtype_(b.dtype()) {}
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor ga, gb;
    if (wants(*this, 0)) {
      ga = kernels::sumToShape(g, a_);
      if (ga.dtype() != a_dtype_) ga = ga.to(a_dtype_);
    }
    if (wants(*this, 1)) {
      gb = kernels::sumToShape(g, b_);
      if (subtract_) gb = kernels::unary(UnaryOp::neg, gb);
      if (gb.dtype() != b_dtype_) gb = gb.to(b_dtype_);
    }
    return {ga, gb};
  }
  std::string name() const override { return subtract_ ? "SubBackward" : "AddBackward"; }

 private:
  bool subtract_;
  Shape a_, b_;
  DType a_dtype_, b_dtype_;
};

class MulBackward final : public Node {
 public:
  // a is saved only when b needs a gradient, and b only when a does.
  MulBackward(Tensor a, Tensor b, Shape a_shape, Shape b_shape)
      : a_(std::move(a)), b_(std::move(b)), a_shape_(std::move(a_shape)), b_shape_(std::move(b_shape)) {}
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor ga, gb;
    if (wants(*this, 0)) ga = kernels::sumToShape(kernels::binary(BinaryOp::mul, g, b_), a_shape_);
    if (wants(*this, 1)) gb = kernels::sumToShape(kernels::binary(BinaryOp::mul, g, a_), b_shape_);
    return {ga, gb};
  }
  std::string name() const override { return "MulBackward"; }
  void releaseSaved() override { a_ = b_ = Tensor(); }

 private:
  Tensor a_, b_;
  Shape a_shape_, b_shape_;
};

class DivBackward final : public Node {
 public:
  // y = a / b; dL/da = g / b, dL/db = -g * a / b^2 = -(g / b) * y.
  DivBackward(Tensor b, Tensor y, Shape a_shape)
      : b_(std::move(b)), y_(std::move(y)), a_shape_(std::move(a_shape)) {}
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor g_over_b = kernels::binary(BinaryOp::div, g, b_);
    Tensor ga, gb;
    if (wants(*this, 0)) ga = kernels::sumToShape(g_over_b, a_shape_);
    if (wants(*this, 1)) {
      gb = kernels::sumToShape(kernels::binary(BinaryOp::mul, g_over_b, y_), b_.shape());
      gb = kernels::unary(UnaryOp::neg, gb);
    }
    return {ga, gb};
  }
  std::string name() const override { return "DivBackward"; }
  void releaseSaved() override { b_ = y_ = Tensor(); }

 private:
  Tensor b_, y_;
  Shape a_shape_;
};

class AddScalarBackward final : public Node {
 public:
  std::vector<Tensor> apply(const Tensor& g) override { return {g}; }
  std::string name() const override { return "AddScalarBackward"; }
};

class MulScalarBackward final : public Node {
 public:
  explicit MulScalarBackward(double s) : s_(s) {}
  std::vector<Tensor> apply(const Tensor& g) override {
    return {kernels::binaryScalar(BinaryOp::mul, g, s_)};
  }
  std::string name() const override { return "MulScalarBackward"; }

 private:
  double s_;
};

class UnaryBackward final : public Node {
 public:
  UnaryBackward(UnaryOp op, Tensor saved, double p) : op_(op), saved_(std::move(saved)), p_(p) {}
  std::vector<Tensor> apply(const Tensor& g) override {
    if (op_ == UnaryOp::neg) return {kernels::unary(UnaryOp::neg, g)};
    return {kernels::unaryBackward(op_, g, saved_, p_)};
  }
  std::string name() const override {
    std::string n = kernels::unaryOpName(op_);
    n[0] = static_cast<char>(std::toupper(n[0]));
    return n + "Backward";
  }
  void releaseSaved() override { saved_ = Tensor(); }

 private:
  UnaryOp op_;
  Tensor saved_;
  double p_;
};

Variable unaryOp(UnaryOp op, const Variable& x, double p = 0.0) {
  Tensor y = kernels::unary(op, x.tensor(), p);
  if (!needsGrad({&x})) return Variable::makeResult(y, nullptr);
  Tensor saved = op == UnaryOp::neg ? Tensor() : kernels::unaryBackwardUsesOutput(op) ? y : x.tensor();
  return record<UnaryBackward>(y, {&x}, op, saved, p);
}

}  // namespace

// add and sub take two floating dtypes as they are (kernels::binary promotes, in one pass for
// autocast's residual adds); mul and div cast first, as their backward multiplies by the operands.
Variable add(const Variable& a, const Variable& b) {
  Tensor y = kernels::binary(BinaryOp::add, a.tensor(), b.tensor());
  return record<AddSubBackward>(y, {&a, &b}, false, a, b);
}

Variable sub(const Variable& a, const Variable& b) {
  Tensor y = kernels::binary(BinaryOp::sub, a.tensor(), b.tensor());
  return record<AddSubBackward>(y, {&a, &b}, true, a, b);
}

Variable mul(const Variable& a0, const Variable& b0) {
  const auto [a, b] = autocast::promote(a0, b0);
  Tensor y = kernels::binary(BinaryOp::mul, a.tensor(), b.tensor());
  if (!needsGrad({&a, &b})) return Variable::makeResult(y, nullptr);
  return record<MulBackward>(y, {&a, &b}, b.requiresGrad() ? a.tensor() : Tensor(),
                             a.requiresGrad() ? b.tensor() : Tensor(), a.shape(), b.shape());
}

Variable div(const Variable& a0, const Variable& b0) {
  const auto [a, b] = autocast::promote(a0, b0);
  Tensor y = kernels::binary(BinaryOp::div, a.tensor(), b.tensor());
  if (!needsGrad({&a, &b})) return Variable::makeResult(y, nullptr);
  return record<DivBackward>(y, {&a, &b}, b.tensor(), b.requiresGrad() ? y : Tensor(), a.shape());
}

Variable add(const Variable& a, double s) {
  return record<AddScalarBackward>(kernels::binaryScalar(BinaryOp::add, a.tensor(), s), {&a});
}

Variable mul(const Variable& a, double s) {
  return record<MulScalarBackward>(kernels::binaryScalar(BinaryOp::mul, a.tensor(), s), {&a}, s);
}

Variable neg(const Variable& a) { return unaryOp(UnaryOp::neg, a); }
Variable pow(const Variable& a, double exponent) { return unaryOp(UnaryOp::pow, a, exponent); }
Variable exp(const Variable& a) { return unaryOp(UnaryOp::exp, a); }
Variable log(const Variable& a) { return unaryOp(UnaryOp::log, a); }
Variable sqrt(const Variable& a) { return unaryOp(UnaryOp::sqrt, a); }

}  // namespace lockstep::autograd
