#pragma once
// Test helpers shared by the op suites: tensor comparison, random inputs, and gradient checks of
// autograd ops against central finite differences in float64.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "lockstep/autograd.h"
#include "lockstep/tensor.h"

namespace lockstep::testing {

/// A tensor of the given shape and dtype filled with U[low, high) from a fixed seed.
inline Tensor randomTensor(const Shape& shape, DType dtype = DType::f64, uint64_t seed = 1, double low = -1.0,
                           double high = 1.0) {
  Tensor t = Tensor::empty(shape, dtype);
  Generator g(seed);
  g.uniform(t, low, high);
  return t;
}

/// Element-wise |a - b| <= atol + rtol * |b|, reporting the first mismatch and its index.
inline ::testing::AssertionResult tensorsNear(const Tensor& a, const Tensor& b, double atol,
                                              double rtol = 0.0) {
  if (a.shape() != b.shape()) {
    return ::testing::AssertionFailure()
           << "shapes differ: " << shapeToString(a.shape()) << " vs " << shapeToString(b.shape());
  }
  auto va = a.toVector<double>(), vb = b.toVector<double>();
  for (size_t i = 0; i < va.size(); ++i) {
    if (!(std::abs(va[i] - vb[i]) <= atol + rtol * std::abs(vb[i]))) {
      return ::testing::AssertionFailure() << "element " << i << ": " << va[i] << " vs " << vb[i] << " (atol "
                                           << atol << ", rtol " << rtol << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

using VariadicFn = std::function<autograd::Variable(const std::vector<autograd::Variable>&)>;

/// Checks d(sum(f(inputs) * r))/d(inputs) from backward() against central differences, for a fixed
/// random r. Inputs should be f64. Indices in `no_grad` are passed without requires_grad.
inline ::testing::AssertionResult gradientsMatch(const VariadicFn& f, const std::vector<Tensor>& inputs,
                                                 double eps = 1e-6, double atol = 1e-6, double rtol = 1e-5,
                                                 const std::vector<size_t>& no_grad = {}) {
  using autograd::Variable;
  auto wants = [&](size_t i) {
    for (size_t j : no_grad) {
      if (j == i) return false;
    }
    return isFloating(inputs[i].dtype());
  };
  std::vector<Variable> vars;
  for (size_t i = 0; i < inputs.size(); ++i) vars.emplace_back(inputs[i].clone(), wants(i));
  Variable y = f(vars);
  Tensor r = randomTensor(y.shape(), DType::f64, 99);
  auto objective = [&](const std::vector<Variable>& vs) {
    autograd::NoGradGuard ng;
    Tensor out = f(vs).tensor().to(DType::f64).contiguous();
    auto vo = out.toVector<double>(), vr = r.toVector<double>();
    double s = 0;
    for (size_t i = 0; i < vo.size(); ++i) s += vo[i] * vr[i];
    return s;
  };
  y.backward(r.to(y.dtype()));
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!wants(i)) continue;
    if (!vars[i].hasGrad()) return ::testing::AssertionFailure() << "input " << i << " got no gradient";
    Tensor analytic = vars[i].grad().to(DType::f64).contiguous();
    auto va = analytic.toVector<double>();
    for (int64_t j = 0; j < inputs[i].numel(); ++j) {
      std::vector<Variable> plus, minus;
      for (size_t k = 0; k < inputs.size(); ++k) {
        Tensor tp = inputs[k].clone().contiguous(), tm = inputs[k].clone().contiguous();
        if (k == i) {
          Tensor fp = tp.reshape({-1}), fm = tm.reshape({-1});
          double v = fp.narrow(0, j, 1).itemDouble();
          fp.narrow(0, j, 1).fill(v + eps);
          fm.narrow(0, j, 1).fill(v - eps);
        }
        plus.emplace_back(tp);
        minus.emplace_back(tm);
      }
      double numeric = (objective(plus) - objective(minus)) / (2 * eps);
      if (!(std::abs(numeric - va[j]) <= atol + rtol * std::abs(numeric))) {
        return ::testing::AssertionFailure() << "input " << i << " element " << j << ": backward gives "
                                             << va[j] << ", finite differences give " << numeric;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace lockstep::testing
