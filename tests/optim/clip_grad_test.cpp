// clipGradNorm on the host, bit for bit the algorithm it has always had (each gradient's norm in f64
// in element order, the norm of the norms, each gradient multiplied by the coefficient in its own
// dtype), now that its arithmetic lives in kernels/norm.h; and clipGradNormTensor's host result.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "lockstep/kernels/norm.h"
#include "lockstep/optim.h"
#include "lockstep/tensor.h"

using namespace lockstep;
using namespace lockstep::optim;
using autograd::Variable;

namespace {

Tensor seeded(const Shape& shape, DType dtype, uint64_t seed) {
  Tensor t = Tensor::empty(shape, dtype);
  Generator(seed).uniform(t, -1.0, 1.0);
  return t;
}

// The algorithm as written before kernels/norm.h, the oracle of the host path.
double oldTensorNorm(const Tensor& g, double p) {
  std::vector<double> x = g.contiguous().toVector<double>();
  if (std::isinf(p)) {
    double m = 0.0;
    for (double v : x) m = std::max(m, std::abs(v));
    return m;
  }
  double s = 0.0;
  if (p == 2.0) {
    for (double v : x) s += v * v;
    return std::sqrt(s);
  }
  for (double v : x) s += std::pow(std::abs(v), p);
  return std::pow(s, 1.0 / p);
}

// Several gradients: f32 and f64, a channels_last one, one whose gradient is a transposed (not
// dense) view, one without a gradient.
struct Params {
  std::vector<Variable> vars;
  explicit Params(uint64_t seed) {
    for (int i = 0; i < 6; ++i) {
      const DType t = i % 2 ? DType::f64 : DType::f32;
      Shape s = i == 2 ? Shape{3, 4, 5, 6} : Shape{1 + 37 * i, 3};
      Tensor w = seeded(s, t, seed + i);
      if (i == 2) w = w.toFormat(MemoryFormat::channels_last);
      vars.emplace_back(w, true);
      if (i == 5) continue;  // no gradient
      Tensor g = seeded(s, t, 100 * seed + i);
      if (i == 2) g = g.toFormat(MemoryFormat::channels_last);
      if (i == 4) g = seeded({3, s[0]}, t, 100 * seed + i).transpose(0, 1);
      vars.back().setGrad(g);
    }
  }
};

}  // namespace

TEST(ClipGradNorm, host_results_are_bitwise_the_previous_algorithm) {
  for (double p : {2.0, 1.0, 1.5, std::numeric_limits<double>::infinity()}) {
    for (double max_norm : {0.5, 1e9}) {
      Params a(1);
      std::vector<double> norms;
      std::vector<std::vector<double>> expected;
      for (auto& v : a.vars) {
        if (v.hasGrad()) norms.push_back(oldTensorNorm(v.grad(), p));
      }
      double total = 0.0;
      if (std::isinf(p)) {
        total = *std::max_element(norms.begin(), norms.end());
      } else {
        for (double n : norms) total += std::pow(n, p);
        total = std::pow(total, 1.0 / p);
      }
      const double raw = max_norm / (total + 1e-6);
      const double coef = std::min(1.0, raw);
      for (auto& v : a.vars) {
        if (!v.hasGrad()) continue;
        std::vector<double> g = v.grad().contiguous().toVector<double>();
        const bool f32 = v.grad().dtype() == DType::f32;
        if (coef != 1.0) {
          for (double& x : g) {
            // Dense: multiplied in the dtype; not dense: in f64, then rounded to the dtype.
            if (!f32)
              x *= coef;
            else if (v.grad().isDense())
              x = double(float(x) * static_cast<float>(coef));
            else
              x = double(float(x * coef));
          }
        }
        expected.push_back(g);
      }
      const double got = clipGradNorm(a.vars, max_norm, {.norm_type = p});
      EXPECT_EQ(got, total) << "p " << p;
      size_t k = 0;
      for (auto& v : a.vars) {
        if (!v.hasGrad()) continue;
        EXPECT_EQ(v.grad().contiguous().toVector<double>(), expected[k++]) << "p " << p;
      }
      Params b(1);
      EXPECT_EQ(gradNorm(b.vars, p), total);
      Tensor t = clipGradNormTensor(b.vars, max_norm, {.norm_type = p});
      EXPECT_TRUE(t.device().isCpu());
      EXPECT_EQ(t.dtype(), DType::f64);
      EXPECT_EQ(t.dim(), 0);
      EXPECT_EQ(t.item<double>(), total);
    }
  }
}

TEST(ClipGradNorm, tensor_form_without_gradients_is_zero_and_errors_name_the_cause) {
  std::vector<Variable> none{Variable(Tensor::ones({3}), true)};
  EXPECT_EQ(clipGradNormTensor(none, 1.0).item<double>(), 0.0);
  EXPECT_EQ(clipGradNorm(none, 1.0), 0.0);
  EXPECT_THROW(clipGradNorm(none, 1.0, {.norm_type = 0.0}), ValueError);
  EXPECT_THROW(gradNorm(none, -1.0), ValueError);
  Params a(3);
  a.vars[0].grad().narrow(0, 0, 1).fill(std::numeric_limits<double>::quiet_NaN());
  EXPECT_THROW(clipGradNorm(a.vars, 1.0, {.error_if_nonfinite = true}), ValueError);
  // Without the check, a NaN norm makes every gradient NaN, as in PyTorch.
  EXPECT_TRUE(std::isnan(clipGradNorm(a.vars, 1.0)));
  EXPECT_TRUE(std::isnan(a.vars[1].grad().toVector<double>()[0]));
}

TEST(NormKernels, host_checks_and_low_precision) {
  EXPECT_THROW(kernels::totalNorm({}, 2.0), ValueError);
  EXPECT_THROW(kernels::norm(Tensor::ones({2}), 0.0), ValueError);
  EXPECT_EQ(kernels::norm(Tensor::empty({0}), 2.0), 0.0);
  EXPECT_EQ(kernels::norm(Tensor::empty({0}), std::numeric_limits<double>::infinity()), 0.0);
  // The max-norm skips NaN, as std::max from 0 does; the sums carry it.
  Tensor x = Tensor::fromVector(std::vector<float>{1.0f, NAN, -3.0f}, {3});
  EXPECT_EQ(kernels::norm(x, std::numeric_limits<double>::infinity()), 3.0);
  EXPECT_TRUE(std::isnan(kernels::norm(x, 2.0)));
  EXPECT_EQ(kernels::combineNorms({}, 2.0), 0.0);
  EXPECT_EQ(kernels::combineNorms({3.0, 4.0}, 2.0), 5.0);
  Tensor h = Tensor::ones({4}, DType::bf16);
  EXPECT_EQ(kernels::totalNorm({h}, 2.0).item<double>(), 2.0);
  // bf16 and f16 are scaled in f32 and rounded once, as on a GPU; a coefficient of 1 touches nothing;
  // integers are refused, named.
  Tensor two = Tensor::scalar(2.0, DType::f64);
  kernels::scaleByClipCoefficient({h}, two, 10.0);
  EXPECT_EQ(h.toVector<double>(), std::vector<double>(4, 1.0));
  for (DType t : {DType::bf16, DType::f16}) {
    Tensor g = Tensor::fromVector(std::vector<float>{1.0f, -3.0f, 0.3f, 1e-3f}, {4}).to(t);
    const Tensor before = g.to(DType::f32);
    const float coef = static_cast<float>(0.7 / (2.0 + 1e-6));
    kernels::scaleByClipCoefficient({g}, two, 0.7);
    const std::vector<float> was = before.toVector<float>();
    std::vector<float> want;
    for (float v : was) want.push_back(v * coef);
    EXPECT_EQ(g.toVector<double>(), Tensor::fromVector(want, {4}).to(t).toVector<double>()) << dtypeName(t);
  }
  Tensor ints = Tensor::ones({4}, DType::i32);
  EXPECT_THROW(kernels::scaleByClipCoefficient({ints}, two, 1.0), NotSupportedError);
  EXPECT_THROW(kernels::scaleByClipCoefficient({x}, Tensor::scalar(2.0, DType::f32), 1.0), ValueError);
}
