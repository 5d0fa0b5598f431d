#include <gtest/gtest.h>

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
