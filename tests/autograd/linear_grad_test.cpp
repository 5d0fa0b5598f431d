#include <gtest/gtest.h>

#include <optional>

#include "common/check.h"
#include "lockstep/kernels.h"
#include "lockstep/kernels/tables/linear.h"

using namespace lockstep;
using namespace lockstep::autograd;
using lockstep::testing::gradientsMatch;
using lockstep::testing::randomTensor;
using lockstep::testing::tensorsNear;

TEST(Linear, gradient) {
  EXPECT_TRUE(gradientsMatch([](const std::vector<Variable>& in) { return linear(in[0], in[1], in[2]); },
                             {randomTensor({3, 4}, DType::f64, 1), randomTensor({5, 4}, DType::f64, 2),
                              randomTensor({5}, DType::f64, 3)}));
  // [..., in] input, no bias.
  EXPECT_TRUE(gradientsMatch([](const std::vector<Variable>& in) { return linear(in[0], in[1], Variable()); },
                             {randomTensor({2, 3, 4}, DType::f64, 4), randomTensor({2, 4}, DType::f64, 5)}));
}

// geluMlp = linear(gelu_tanh(linear(x, w1, b1)), w2, b2): gradients by central differences, and
// values and gradients equal to the composed ops (the CPU runs the same kernels), with and without
// biases, under autocast too, and only the gradients that are needed.
TEST(GeluMlp, gradient) {
  auto mlp = [](const std::vector<Variable>& in) { return geluMlp(in[0], in[1], in[2], in[3], in[4]); };
  EXPECT_TRUE(gradientsMatch(mlp, {randomTensor({2, 3, 4}, DType::f64, 1),
                                   randomTensor({6, 4}, DType::f64, 2), randomTensor({6}, DType::f64, 3),
                                   randomTensor({5, 6}, DType::f64, 4), randomTensor({5}, DType::f64, 5)}));
  EXPECT_TRUE(gradientsMatch(
      [](const std::vector<Variable>& in) { return geluMlp(in[0], in[1], Variable(), in[2], Variable()); },
      {randomTensor({3, 4}, DType::f64, 6), randomTensor({6, 4}, DType::f64, 7),
       randomTensor({5, 6}, DType::f64, 8)}));
}

TEST(GeluMlp, equals_the_composed_ops) {
  for (bool bias : {true, false}) {
    for (bool autocast : {false, true}) {
      auto leaf = [](const Shape& s, uint64_t seed, bool grad) {
        return Variable(randomTensor(s, DType::f32, seed), grad);
      };
      Variable x = leaf({2, 5, 8}, 1, true), w1 = leaf({32, 8}, 2, true), w2 = leaf({8, 32}, 4, true);
      Variable b1 = bias ? leaf({32}, 3, true) : Variable(), b2 = bias ? leaf({8}, 5, true) : Variable();
      std::vector<Variable> fused{x, w1, b1, w2, b2}, plain;
      for (const Variable& v : fused) plain.push_back(v.defined() ? Variable(v.tensor(), true) : Variable());
      Tensor g = randomTensor({2, 5, 8}, DType::f32, 6);
      Variable y, want;
      {
        std::optional<AutocastGuard> scope;
        if (autocast) scope.emplace(DType::bf16);
        y = geluMlp(fused[0], fused[1], fused[2], fused[3], fused[4]);
        want =
            linear(gelu(linear(plain[0], plain[1], plain[2]), GeluApproximation::tanh), plain[3], plain[4]);
      }
      ASSERT_EQ(y.dtype(), want.dtype());
      EXPECT_TRUE(tensorsNear(y.tensor(), want.tensor(), 0, 0));
      y.backward(g.to(y.dtype()));
      want.backward(g.to(want.dtype()));
      for (size_t i = 0; i < fused.size(); ++i) {
        if (!fused[i].defined()) continue;
        ASSERT_TRUE(fused[i].hasGrad()) << i;
        EXPECT_TRUE(tensorsNear(fused[i].grad(), plain[i].grad(), 1e-6, 1e-5))
            << "input " << i << (bias ? " with" : " without") << " biases" << (autocast ? ", autocast" : "");
      }
    }
  }
  // Only what is needed: x and the first layer's bias want no gradient here.
  Variable x(randomTensor({3, 4}, DType::f32, 1)), w1(randomTensor({6, 4}, DType::f32, 2), true),
      b1(randomTensor({6}, DType::f32, 3)), w2(randomTensor({5, 6}, DType::f32, 4), true);
  geluMlp(x, w1, b1, w2, Variable()).backward(Tensor::ones({3, 5}));
  EXPECT_TRUE(w1.hasGrad());
  EXPECT_TRUE(w2.hasGrad());
  EXPECT_FALSE(x.hasGrad());
  EXPECT_FALSE(b1.hasGrad());
}

// residual + linear(x, w, b) as one op: gradients by central differences; on the CPU the same
// kernels as add(residual, linear(...)), so the same values and gradients bit for bit, under autocast
// too (the f32 residual keeps its dtype, the layer's gradient arrives in bf16); a residual of another
// shape is an error naming it.
TEST(LinearResidual, gradient) {
  EXPECT_TRUE(gradientsMatch(
      [](const std::vector<Variable>& in) { return linearResidual(in[3], in[0], in[1], in[2]); },
      {randomTensor({2, 3, 4}, DType::f64, 1), randomTensor({5, 4}, DType::f64, 2),
       randomTensor({5}, DType::f64, 3), randomTensor({2, 3, 5}, DType::f64, 4)}));
  EXPECT_TRUE(gradientsMatch(
      [](const std::vector<Variable>& in) { return geluMlp(in[0], in[1], in[2], in[3], in[4], in[5]); },
      {randomTensor({3, 4}, DType::f64, 5), randomTensor({6, 4}, DType::f64, 6),
       randomTensor({6}, DType::f64, 7), randomTensor({4, 6}, DType::f64, 8),
       randomTensor({4}, DType::f64, 9), randomTensor({3, 4}, DType::f64, 10)}));
}

TEST(LinearResidual, equals_the_add_of_the_composed_ops) {
  for (bool mlp : {false, true}) {
    for (bool autocast : {false, true}) {
      auto leaf = [](const Shape& s, uint64_t seed) {
        return Variable(randomTensor(s, DType::f32, seed), true);
      };
      std::vector<Variable> fused{leaf({2, 5, 8}, 1), leaf({16, 8}, 2), leaf({16}, 3),
                                  leaf({8, 16}, 4),   leaf({8}, 5),     leaf({2, 5, 8}, 6)};
      std::vector<Variable> plain;
      for (const Variable& v : fused) plain.push_back(Variable(v.tensor(), true));
      Variable y, want;
      {
        std::optional<AutocastGuard> scope;
        if (autocast) scope.emplace(DType::bf16);
        if (mlp) {
          y = geluMlp(fused[0], fused[1], fused[2], fused[3], fused[4], fused[5]);
          want = add(plain[5], geluMlp(plain[0], plain[1], plain[2], plain[3], plain[4]));
        } else {
          y = linearResidual(fused[5], fused[0], narrow(fused[3], 1, 0, 8), fused[4]);
          want = add(plain[5], linear(plain[0], narrow(plain[3], 1, 0, 8), plain[4]));
        }
      }
      const std::string what =
          std::string(mlp ? "geluMlp" : "linearResidual") + (autocast ? ", autocast" : "");
      ASSERT_EQ(y.dtype(), DType::f32) << what;
      ASSERT_EQ(want.dtype(), DType::f32) << what;
      EXPECT_TRUE(tensorsNear(y.tensor(), want.tensor(), 0, 0)) << what;
      Tensor g = randomTensor({2, 5, 8}, DType::f32, 7);
      y.backward(g);
      want.backward(g);
      for (size_t i = 0; i < fused.size(); ++i) {
        if (!mlp && (i == 1 || i == 2)) continue;  // not inputs of the linear case
        ASSERT_TRUE(fused[i].hasGrad()) << what << ", input " << i;
        EXPECT_EQ(fused[i].grad().dtype(), DType::f32) << what << ", input " << i;
        EXPECT_TRUE(tensorsNear(fused[i].grad(), plain[i].grad(), 0, 0)) << what << ", input " << i;
      }
    }
  }
  // A residual that wants no gradient gets none; the layer's still flow.
  Variable x(randomTensor({3, 4}, DType::f32, 8), true), w(randomTensor({5, 4}, DType::f32, 9), true);
  Variable r(randomTensor({3, 5}, DType::f32, 10));
  linearResidual(r, x, w, Variable()).backward(Tensor::ones({3, 5}));
  EXPECT_TRUE(x.hasGrad());
  EXPECT_TRUE(w.hasGrad());
  EXPECT_FALSE(r.hasGrad());
  try {
    linearResidual(Variable(randomTensor({3, 4})), x, w, Variable());
    FAIL() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("residual"), std::string::npos) << e.what();
  }
}

TEST(Linear, forward_matches_reference) {
  Tensor x = randomTensor({32, 64}, DType::f32, 1), w = randomTensor({10, 64}, DType::f32, 2),
         b = randomTensor({10}, DType::f32, 3);
  Variable y = linear(Variable(x), Variable(w, true), Variable(b, true));
  EXPECT_TRUE(tensorsNear(y.tensor(), kernels::reference::kLinear.linearForward(x, w, b), 1e-5, 1e-5));
}

TEST(Linear, skips_gradients_nobody_needs) {
  Variable x(randomTensor({3, 4}, DType::f32, 1)), w(randomTensor({5, 4}, DType::f32, 2), true);
  Variable b(randomTensor({5}, DType::f32, 3), false);
  linear(x, w, b).backward(Tensor::ones({3, 5}));
  EXPECT_TRUE(w.hasGrad());
  EXPECT_FALSE(x.hasGrad());
  EXPECT_FALSE(b.hasGrad());
}

TEST(Linear, rejects_mismatched_shapes) {
  EXPECT_THROW(linear(Variable(randomTensor({3, 4})), Variable(randomTensor({5, 3})), Variable()),
               ValueError);
}

TEST(Matmul, gradient) {
  auto mm = [](const std::vector<Variable>& in) { return matmul(in[0], in[1]); };
  EXPECT_TRUE(gradientsMatch(mm, {randomTensor({3, 4}, DType::f64, 1), randomTensor({4, 2}, DType::f64, 2)}));
  // Broadcast batch dims: both operands' gradients are summed over the dims they were broadcast along.
  EXPECT_TRUE(gradientsMatch(
      mm, {randomTensor({2, 1, 3, 4}, DType::f64, 3), randomTensor({3, 4, 2}, DType::f64, 4)}));
  EXPECT_TRUE(
      gradientsMatch(mm, {randomTensor({2, 3, 4}, DType::f64, 5), randomTensor({4, 2}, DType::f64, 6)}));
  // 1-d operands as in torch.matmul.
  EXPECT_TRUE(gradientsMatch(mm, {randomTensor({4}, DType::f64, 7), randomTensor({2, 4, 3}, DType::f64, 8)}));
  EXPECT_TRUE(gradientsMatch(mm, {randomTensor({3, 4}, DType::f64, 9), randomTensor({4}, DType::f64, 10)}));
}

TEST(Matmul, forward_matches_reference) {
  Tensor a = randomTensor({2, 3, 4}, DType::f32, 1), b = randomTensor({4, 5}, DType::f32, 2);
  EXPECT_TRUE(tensorsNear(matmul(Variable(a), Variable(b)).tensor(), kernels::reference::kLinear.matmul(a, b),
                          1e-5, 1e-5));
  EXPECT_EQ(matmul(Variable(randomTensor({4})), Variable(randomTensor({4}))).shape(), Shape{});
  EXPECT_EQ(matmul(Variable(randomTensor({4})), Variable(randomTensor({2, 4, 3}))).shape(), (Shape{2, 3}));
}

TEST(Matmul, rejects_mismatched_shapes) {
  EXPECT_THROW(matmul(Variable(randomTensor({3, 4})), Variable(randomTensor({3, 4}))), ValueError);
}

TEST(LeakyRelu, gradient) {
  // Away from the kink at 0, where finite differences are not the derivative.
  auto v = randomTensor({3, 4}, DType::f64, 5).toVector<double>();
  for (auto& e : v) e = e >= 0 ? e + 0.1 : e - 0.1;
  EXPECT_TRUE(gradientsMatch([](const std::vector<Variable>& in) { return leakyRelu(in[0], 0.2); },
                             {Tensor::fromVector<double>(v, {3, 4})}));
}

TEST(Gelu, gradient) {
  EXPECT_TRUE(gradientsMatch([](const std::vector<Variable>& in) { return gelu(in[0]); },
                             {randomTensor({3, 4}, DType::f64, 6, -3, 3)}));
}

TEST(Tanh, gradient) {
  EXPECT_TRUE(gradientsMatch([](const std::vector<Variable>& in) { return autograd::tanh(in[0]); },
                             {randomTensor({3, 4}, DType::f64, 7, -2, 2)}));
}

TEST(Sigmoid, gradient) {
  EXPECT_TRUE(gradientsMatch([](const std::vector<Variable>& in) { return sigmoid(in[0]); },
                             {randomTensor({3, 4}, DType::f64, 8, -3, 3)}));
}
