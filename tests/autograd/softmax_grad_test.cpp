#include <gtest/gtest.h>

#include "common/check.h"
#include "lockstep/kernels.h"
#include "lockstep/kernels/tables/softmax.h"

using namespace lockstep;
using namespace lockstep::autograd;
using lockstep::testing::gradientsMatch;
using lockstep::testing::randomTensor;
using lockstep::testing::tensorsNear;

TEST(Softmax, gradient) {
  for (int64_t dim : {0, 1, -1}) {
    EXPECT_TRUE(gradientsMatch([&](const std::vector<Variable>& in) { return softmax(in[0], dim); },
                               {randomTensor({2, 3, 4}, DType::f64, 1, -2, 2)}));
  }
}

TEST(LogSoftmax, gradient) {
  for (int64_t dim : {0, 2}) {
    EXPECT_TRUE(gradientsMatch([&](const std::vector<Variable>& in) { return logSoftmax(in[0], dim); },
                               {randomTensor({2, 3, 4}, DType::f64, 2, -2, 2)}));
  }
}

TEST(Softmax, forward_matches_reference) {
  Tensor x = randomTensor({4, 6}, DType::f32, 3);
  EXPECT_TRUE(
      tensorsNear(softmax(Variable(x), 1).tensor(), kernels::reference::kSoftmax.softmaxForward(x, 1), 1e-6));
  EXPECT_TRUE(tensorsNear(logSoftmax(Variable(x), 0).tensor(),
                          kernels::reference::kSoftmax.logSoftmaxForward(x, 0), 1e-6));
}

TEST(Softmax, rejects_mismatched_shapes) {
  EXPECT_THROW(softmax(Variable(randomTensor({4, 6})), 2), ValueError);
  EXPECT_THROW(logSoftmax(Variable(randomTensor({4, 6})), -3), ValueError);
}

TEST(Dropout, gradient) {
  // A fixed generator state per evaluation, so every finite-difference probe sees the same mask.
  EXPECT_TRUE(gradientsMatch(
      [](const std::vector<Variable>& in) {
        Generator g(11);
        return dropout(in[0], 0.4, true, g);
      },
      {randomTensor({4, 5}, DType::f64, 4)}));
}

TEST(Dropout, is_identity_when_not_training) {
  Variable x(randomTensor({3, 4}), true);
  Generator g(1);
  Variable y = dropout(x, 0.5, false, g);
  EXPECT_TRUE(y.sameAs(x));
  EXPECT_EQ(g.offset(), 0u);
}

TEST(Dropout, same_generator_state_gives_same_mask) {
  Variable x(Tensor::ones({8, 16}), true);
  Generator g1(5), g2(5);
  Variable a = dropout(x, 0.5, true, g1), b = dropout(x, 0.5, true, g2);
  EXPECT_TRUE(tensorsNear(a.tensor(), b.tensor(), 0.0));
  // Kept elements are scaled by 1 / (1 - p); the backward uses the saved mask.
  for (float v : a.tensor().toVector<float>()) EXPECT_TRUE(v == 0.0f || v == 2.0f) << v;
  a.backward(Tensor::ones({8, 16}));
  EXPECT_TRUE(tensorsNear(x.grad(), a.tensor(), 0.0));
}

TEST(Dropout, rejects_mismatched_shapes) {
  Generator g(1);
  EXPECT_THROW(dropout(Variable(randomTensor({3})), -0.1, true, g), ValueError);
}
