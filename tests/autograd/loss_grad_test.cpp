#include <gtest/gtest.h>

#include "common/check.h"
#include "lockstep/kernels.h"
#include "lockstep/kernels/tables/loss.h"

using namespace lockstep;
using namespace lockstep::autograd;
using lockstep::testing::gradientsMatch;
using lockstep::testing::randomTensor;
using lockstep::testing::tensorsNear;

TEST(CrossEntropy, gradient) {
  Tensor t = Tensor::fromVector<int64_t>({2, 0, -100, 3, 1}, {5});
  for (Reduction r : {Reduction::mean, Reduction::sum, Reduction::none}) {
    for (double s : {0.0, 0.1}) {
      CrossEntropyOptions o{r, s, -100};
      EXPECT_TRUE(gradientsMatch([&](const std::vector<Variable>& in) { return crossEntropy(in[0], t, o); },
                                 {randomTensor({5, 4}, DType::f64, 1, -3, 3)}));
    }
  }
}

TEST(CrossEntropy, is_a_single_graph_node) {
  Variable x(randomTensor({4, 3}, DType::f32, 1), true);
  Variable loss = crossEntropy(x, Tensor::fromVector<int64_t>({0, 1, 2, 1}, {4}));
  ASSERT_TRUE(loss.gradFn());
  EXPECT_EQ(loss.gradFn()->name(), "CrossEntropyBackward");
  ASSERT_EQ(loss.gradFn()->edges().size(), 1u);
  EXPECT_EQ(loss.gradFn()->edges()[0]->name(), "AccumulateGrad");
}

TEST(CrossEntropy, forward_matches_reference) {
  Tensor x = randomTensor({32, 10}, DType::f32, 2, -4, 4);
  Tensor t = Tensor::fromVector<int64_t>(std::vector<int64_t>(32, 3), {32});
  Variable loss = crossEntropy(Variable(x), t, {Reduction::mean, 0.1, -100});
  EXPECT_NEAR(loss.item(),
              kernels::reference::kLoss.crossEntropyForward(x, t, {kernels::LossReduction::mean, 0.1, -100})
                  .first.itemDouble(),
              1e-5);
}

TEST(CrossEntropy, rejects_mismatched_shapes) {
  EXPECT_THROW(crossEntropy(Variable(randomTensor({4, 3})), Tensor::fromVector<int64_t>({0, 1}, {2})),
               ValueError);
}

TEST(NllLoss, gradient) {
  Tensor t = Tensor::fromVector<int64_t>({2, 0, -100, 3}, {4});
  for (Reduction r : {Reduction::mean, Reduction::sum, Reduction::none}) {
    EXPECT_TRUE(
        gradientsMatch([&](const std::vector<Variable>& in) { return nllLoss(logSoftmax(in[0], 1), t, r); },
                       {randomTensor({4, 5}, DType::f64, 3)}));
  }
}

TEST(NllLoss, forward_matches_reference) {
  // nll_loss(log_softmax(x)) is cross-entropy without smoothing.
  Tensor x = randomTensor({6, 4}, DType::f32, 4);
  Tensor t = Tensor::fromVector<int64_t>({0, 1, 2, 3, 2, 1}, {6});
  Variable a = nllLoss(logSoftmax(Variable(x), 1), t), b = crossEntropy(Variable(x), t);
  EXPECT_NEAR(a.item(), b.item(), 1e-5);
}

TEST(NllLoss, rejects_mismatched_shapes) {
  EXPECT_THROW(nllLoss(Variable(randomTensor({4, 3})), Tensor::fromVector<int64_t>({0, 1}, {2})), ValueError);
}

TEST(MseLoss, gradient) {
  for (Reduction r : {Reduction::mean, Reduction::sum, Reduction::none}) {
    EXPECT_TRUE(gradientsMatch([&](const std::vector<Variable>& in) { return mseLoss(in[0], in[1], r); },
                               {randomTensor({3, 4}, DType::f64, 5), randomTensor({3, 4}, DType::f64, 6)}));
  }
}

TEST(MseLoss, forward_matches_reference) {
  Tensor a = randomTensor({3, 4}, DType::f32, 5), b = randomTensor({3, 4}, DType::f32, 6);
  EXPECT_TRUE(tensorsNear(mseLoss(Variable(a), Variable(b)).tensor(),
                          kernels::reference::kLoss.mseLossForward(a, b, kernels::LossReduction::mean),
                          1e-6));
}

TEST(MseLoss, rejects_mismatched_shapes) {
  EXPECT_THROW(mseLoss(Variable(randomTensor({3, 4})), Variable(randomTensor({4, 3}))), ValueError);
}
