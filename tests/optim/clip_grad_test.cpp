// clipGradNorm on the host, bit for bit the algorithm kernels/norm.h documents (each gradient's norm
// in f64 over fixed chunks of element order in interleaved lanes, the norm of the norms, each
// gradient multiplied by the coefficient in its own dtype), whatever the CPU's vector width and the
// number of threads; and clipGradNormTensor's host result.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "lockstep/kernels/norm.h"
#include "lockstep/kernels/threads.h"
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

// The documented algorithm, the oracle of the host path: element i of chunk c (kChunk elements)
// goes to lane i % kLanes of that chunk, the lanes are joined pairwise ((0+1)+(2+3))+((4+5)+(6+7)),
// the chunks added in order.
constexpr int64_t kChunk = 65536;
constexpr int kLanes = 8;

double oracleNorm(const Tensor& g, double p) {
  std::vector<double> x = g.contiguous().to(DType::f64).toVector<double>();
  const bool inf = std::isinf(p);
  auto add = [&](double acc, double v) {
    if (inf) return std::max(acc, std::abs(v));
    return p == 2.0 ? acc + v * v : acc + std::pow(std::abs(v), p);
  };
  auto join = [&](double a, double b) { return inf ? std::max(a, b) : a + b; };
  double total = 0.0;
  for (size_t c = 0; c < x.size(); c += kChunk) {
    double lane[kLanes] = {};
    for (size_t i = c; i < std::min(x.size(), c + kChunk); ++i)
      lane[(i - c) % kLanes] = add(lane[(i - c) % kLanes], x[i]);
    total = join(total, join(join(join(lane[0], lane[1]), join(lane[2], lane[3])),
                             join(join(lane[4], lane[5]), join(lane[6], lane[7]))));
  }
  if (inf) return total;
  return p == 2.0 ? std::sqrt(total) : std::pow(total, 1.0 / p);
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

TEST(ClipGradNorm, host_results_are_bitwise_the_documented_algorithm) {
  for (double p : {2.0, 1.0, 1.5, std::numeric_limits<double>::infinity()}) {
    for (double max_norm : {0.5, 1e9}) {
      Params a(1);
      std::vector<double> norms;
      std::vector<std::vector<double>> expected;
      for (auto& v : a.vars) {
        if (v.hasGrad()) norms.push_back(oracleNorm(v.grad(), p));
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
  // Every norm carries a NaN, the max-norm too (torch's clip_grad_norm_ reports nan).
  Tensor x = Tensor::fromVector(std::vector<float>{1.0f, NAN, -3.0f}, {3});
  EXPECT_TRUE(std::isnan(kernels::norm(x, std::numeric_limits<double>::infinity())));
  EXPECT_TRUE(std::isnan(kernels::norm(Tensor::fromVector(std::vector<float>{NAN, 1.0f}, {2}),
                                       std::numeric_limits<double>::infinity())));
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

// Tensors of several chunks and a tail: the host norm is the documented sum with one thread and
// with several (threads take whole chunks), in every floating dtype (16-bit ones widened exactly);
// the clip multiplies every chunk.
TEST(NormKernels, host_norms_over_many_chunks_are_the_documented_sums_with_any_thread_count) {
  const int threads = kernels::numThreads();
  for (int64_t n : {int64_t{7}, 3 * kChunk + 13, int64_t{1} << 20}) {
    for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
      const Tensor g = seeded({n}, DType::f32, static_cast<uint64_t>(n)).to(t);
      for (double p : {2.0, 1.0, 3.0, std::numeric_limits<double>::infinity()}) {
        const double want = oracleNorm(g, p);
        for (int k : {1, 2, 3}) {
          kernels::setNumThreads(k);
          EXPECT_EQ(kernels::norm(g, p), want) << n << " " << dtypeName(t) << " p " << p << " threads " << k;
        }
      }
    }
    kernels::setNumThreads(threads);
    Tensor g = seeded({n}, DType::f32, 7);
    const std::vector<float> was = g.toVector<float>();
    const double total = kernels::totalNorm({g}, 2.0).item<double>();
    kernels::scaleByClipCoefficient({g}, Tensor::scalar(total, DType::f64), 0.5);
    const float coef = static_cast<float>(0.5 / (total + 1e-6));
    const std::vector<float> got = g.toVector<float>();
    for (size_t i = 0; i < was.size(); i += 997) ASSERT_EQ(got[i], was[i] * coef) << i;
    EXPECT_EQ(got.back(), was.back() * coef);
  }
  kernels::setNumThreads(threads);
}
