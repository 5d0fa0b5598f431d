// Default initialisation: PyTorch's bounds (kaiming_uniform_(a=sqrt(5)) = U(+-1/sqrt(fan_in)) for
// weights, U(+-1/sqrt(fan_in)) for biases, 1/0 for norms), statistics, and seeding.
#include <gtest/gtest.h>

#include <cmath>

#include "lockstep/nn.h"

using namespace lockstep;
using namespace lockstep::nn;

namespace {
struct Stats {
  double min, max, mean, var;
};
Stats stats(const Tensor& t) {
  auto v = t.toVector<double>();
  Stats s{1e300, -1e300, 0, 0};
  for (double x : v) {
    s.min = std::min(s.min, x);
    s.max = std::max(s.max, x);
    s.mean += x;
  }
  s.mean /= static_cast<double>(v.size());
  for (double x : v) s.var += (x - s.mean) * (x - s.mean);
  s.var /= static_cast<double>(v.size());
  return s;
}
// U(-b, b): inside the bounds, near them at the extremes, mean 0, variance b^2/3.
void expectUniform(const Tensor& t, double b) {
  Stats s = stats(t);
  const double n = static_cast<double>(t.numel());
  EXPECT_GE(s.min, -b);
  EXPECT_LE(s.max, b);
  EXPECT_LT(s.min, -0.95 * b);
  EXPECT_GT(s.max, 0.95 * b);
  EXPECT_NEAR(s.mean, 0.0, 5 * b / std::sqrt(3 * n));
  EXPECT_NEAR(s.var, b * b / 3, 0.05 * b * b / 3);
}
}  // namespace

TEST(Init, linear_matches_pytorch_bounds) {
  Linear fc(LinearOptions{400, 300});
  const double b = 1.0 / std::sqrt(400.0);  // kaiming_uniform(a=sqrt(5)): sqrt(6/((1+5)*fan_in))
  expectUniform(fc.weight().tensor(), b);
  expectUniform(fc.bias().tensor(), b);
  EXPECT_EQ(fc.weight().shape(), (Shape{300, 400}));
  EXPECT_EQ(fc.weight().dtype(), DType::f32);
}

TEST(Init, conv2d_fan_in_counts_groups_and_kernel) {
  Conv2d conv(Conv2dOptions{.in_channels = 64, .out_channels = 128, .kernel_size = {3, 3}, .groups = 2});
  EXPECT_EQ(conv.weight().shape(), (Shape{128, 32, 3, 3}));
  const double b = 1.0 / std::sqrt(32.0 * 9.0);
  expectUniform(conv.weight().tensor(), b);
  auto bs = stats(conv.bias().tensor());
  EXPECT_GE(bs.min, -b);
  EXPECT_LE(bs.max, b);
  Conv2d nobias(Conv2dOptions{.in_channels = 3, .out_channels = 8, .bias = false});
  EXPECT_FALSE(nobias.bias().defined());
  EXPECT_EQ(nobias.namedParameters().size(), 1u);
}

TEST(Init, norms_start_at_one_and_zero) {
  BatchNorm2d bn(BatchNorm2dOptions{16});
  EXPECT_EQ(bn.weight().tensor().toVector<float>(), std::vector<float>(16, 1.0f));
  EXPECT_EQ(bn.bias().tensor().toVector<float>(), std::vector<float>(16, 0.0f));
  EXPECT_EQ(bn.runningMean().toVector<float>(), std::vector<float>(16, 0.0f));
  EXPECT_EQ(bn.runningVar().toVector<float>(), std::vector<float>(16, 1.0f));
  EXPECT_EQ(bn.numBatchesTracked(), 0);
  LayerNorm ln(LayerNormOptions{{8}});
  EXPECT_EQ(ln.weight().tensor().toVector<float>(), std::vector<float>(8, 1.0f));
  EXPECT_EQ(ln.bias().tensor().toVector<float>(), std::vector<float>(8, 0.0f));
}

TEST(Init, seeded_and_reproducible) {
  manualSeed(42);
  Linear a(LinearOptions{10, 5});
  manualSeed(42);
  Linear b(LinearOptions{10, 5});
  EXPECT_EQ(a.weight().tensor().toVector<float>(), b.weight().tensor().toVector<float>());
  EXPECT_EQ(a.bias().tensor().toVector<float>(), b.bias().tensor().toVector<float>());
  Linear c(LinearOptions{10, 5});  // the default generator moved on
  EXPECT_NE(a.weight().tensor().toVector<float>(), c.weight().tensor().toVector<float>());
  Generator g1(7), g2(7);
  Linear d(LinearOptions{10, 5, true, &g1});
  Linear e(LinearOptions{10, 5, true, &g2});
  EXPECT_EQ(d.weight().tensor().toVector<float>(), e.weight().tensor().toVector<float>());
  EXPECT_EQ(g1.offset(), 55u);  // weight then bias, one counter per element
}

TEST(Init, initialisers) {
  EXPECT_EQ(init::computeFans({8, 4, 3, 3}), (std::pair<int64_t, int64_t>{36, 72}));
  EXPECT_THROW(init::computeFans({5}), ValueError);
  EXPECT_DOUBLE_EQ(init::calculateGain("relu"), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(init::calculateGain("leaky_relu", std::sqrt(5.0)), std::sqrt(1.0 / 3.0));
  EXPECT_DOUBLE_EQ(init::calculateGain("tanh"), 5.0 / 3.0);
  EXPECT_THROW(init::calculateGain("swish"), ValueError);
  Generator g(3);
  Tensor w = Tensor::empty({256, 512});
  init::kaimingUniform(w, 0.0, init::FanMode::fan_in, "relu", g);
  expectUniform(w, std::sqrt(6.0 / 512.0));
  init::xavierUniform(w, 1.0, g);
  expectUniform(w, std::sqrt(6.0 / (512.0 + 256.0)));
  init::kaimingNormal(w, 0.0, init::FanMode::fan_out, "relu", g);
  EXPECT_NEAR(stats(w).var, 2.0 / 256.0, 0.05 * 2.0 / 256.0);
}
