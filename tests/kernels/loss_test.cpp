#include "lockstep/kernels/tables/loss.h"

#include <cmath>
#include <limits>

#include "common/check.h"
#include "lockstep/kernels.h"

using namespace lockstep;
using kernels::LossReduction;
using lockstep::testing::randomTensor;
using lockstep::testing::tensorsNear;

namespace {
Tensor randomTargets(int64_t n, int64_t c, uint64_t seed, int64_t ignore_every = 0,
                     int64_t ignore_index = -100) {
  Generator g(seed);
  std::vector<int64_t> t(n);
  for (int64_t i = 0; i < n; ++i) {
    t[i] = ignore_every && i % ignore_every == 1 ? ignore_index : static_cast<int64_t>(g.nextBelow(c));
  }
  return Tensor::fromVector<int64_t>(t, {n});
}

// The fixed example whose expected values came from torch 1.13 (see tests below).
Tensor torchLogits(DType dt) {
  return Tensor::fromVector<double>({0.5, -1.2, 2.0, 0.1, 1.5, 0.3, -0.7, 0.0, -0.2, 0.4, 0.9, -1.1}, {3, 4})
      .to(dt);
}
}  // namespace

TEST(CrossEntropy, forward_and_backward_match_reference) {
  for (auto [n, c] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {1, 5}, {32, 10}, {7, 3}}) {
    Tensor x = randomTensor({n, c}, DType::f32, 1, -5, 5);
    for (int64_t ignore_every : {0, 3}) {
      Tensor t = randomTargets(n, c, 2, ignore_every);
      for (auto r : {LossReduction::mean, LossReduction::sum, LossReduction::none}) {
        for (double s : {0.0, 0.1}) {
          kernels::CrossEntropyParams p{r, s, -100};
          auto [loss, lse] = kernels::crossEntropyForward(x, t, p);
          auto [rloss, rlse] = kernels::reference::kLoss.crossEntropyForward(x, t, p);
          EXPECT_TRUE(tensorsNear(loss, rloss, 1e-5, 1e-5));
          EXPECT_TRUE(tensorsNear(lse, rlse, 1e-6, 1e-5));
          Tensor g = r == LossReduction::none ? randomTensor({n}, DType::f32, 3) : Tensor::scalar(0.7);
          EXPECT_TRUE(tensorsNear(kernels::crossEntropyBackward(g, x, lse, t, p),
                                  kernels::reference::kLoss.crossEntropyBackward(g, x, rlse, t, p), 1e-6,
                                  1e-5));
        }
      }
    }
  }
}

// f32_loss (autocast's loss): bf16/f16 logits give the f32 logits' loss and logsumexp, and their
// gradient rounded to the logits' dtype; on f32 logits the flag changes nothing.
TEST(CrossEntropy, f32_loss_on_narrow_logits_is_the_f32_loss) {
  Tensor t = randomTargets(9, 40, 2, 3);
  for (DType dt : {DType::bf16, DType::f16, DType::f32}) {
    Tensor x = randomTensor({9, 40}, DType::f32, 1, -5, 5).to(dt);
    for (auto r : {LossReduction::mean, LossReduction::sum, LossReduction::none}) {
      kernels::CrossEntropyParams p{r, 0.1, -100}, narrow = p;
      narrow.f32_loss = true;
      auto [want, want_lse] = kernels::crossEntropyForward(x.to(DType::f32), t, p);
      auto [loss, lse] = kernels::crossEntropyForward(x, t, narrow);
      ASSERT_EQ(loss.dtype(), DType::f32) << dtypeName(dt);
      EXPECT_TRUE(tensorsNear(loss, want, 0, 0)) << dtypeName(dt);
      EXPECT_TRUE(tensorsNear(lse, want_lse, 0, 0)) << dtypeName(dt);
      Tensor g = r == LossReduction::none ? randomTensor({9}, DType::f32, 3) : Tensor::scalar(0.7f);
      Tensor gx = kernels::crossEntropyBackward(g, x, lse, t, narrow);
      ASSERT_EQ(gx.dtype(), dt);
      EXPECT_TRUE(
          tensorsNear(gx, kernels::crossEntropyBackward(g, x.to(DType::f32), want_lse, t, p).to(dt), 0, 0))
          << dtypeName(dt);
    }
  }
}

TEST(CrossEntropy, label_smoothing_matches_torch) {
  // Expected values from torch 1.13: F.cross_entropy(x, t, reduction=..., label_smoothing=0.1) on
  // the 3x4 logits of torchLogits(), and x.grad after backward() of the mean.
  const std::vector<double> grad_mean{0.0442869519,  0.0012795258, -0.0725055763, 0.0269390987,
                                      -0.1044756359, 0.0530674252, 0.0142547434,  0.0371534673,
                                      0.0451467109,  0.0891136607, 0.1523295984,  -0.28658997};
  const std::vector<double> grad_mean_ignored{
      0.0664304278, 0.0019192887, -0.1087583645, 0.040408648,  0, 0, 0, 0,
      0.0677200663, 0.133670491,  0.2284943976,  -0.4298849549};
  for (DType dt : {DType::f32, DType::f64}) {
    const double tol = dt == DType::f32 ? 1e-6 : 1e-9;
    Tensor x = torchLogits(dt), t = Tensor::fromVector<int64_t>({2, 0, 3}, {3});
    Tensor ti = Tensor::fromVector<int64_t>({2, -100, 3}, {3});
    kernels::CrossEntropyParams mean{LossReduction::mean, 0.1, -100}, sum{LossReduction::sum, 0.1, -100},
        none{LossReduction::none, 0.1, -100};
    auto [lm, pm] = kernels::crossEntropyForward(x, t, mean);
    EXPECT_NEAR(lm.itemDouble(), 1.2483655026587683, tol);
    EXPECT_NEAR(kernels::crossEntropyForward(x, t, sum).first.itemDouble(), 3.745096507976305, tol);
    EXPECT_TRUE(tensorsNear(
        kernels::crossEntropyForward(x, t, none).first,
        Tensor::fromVector<double>({0.5110412949049112, 0.6142208015660495, 2.619834411505344}, {3}),
        tol * 4));
    EXPECT_TRUE(tensorsNear(kernels::crossEntropyBackward(Tensor::scalar(1.0, dt), x, pm, t, mean),
                            Tensor::fromVector<double>(grad_mean, {3, 4}), 1e-7));
    // ignore_index: left out of both the sum and the mean's count.
    auto [li, pi] = kernels::crossEntropyForward(x, ti, mean);
    EXPECT_NEAR(li.itemDouble(), 1.5654378532051276, tol);
    EXPECT_NEAR(kernels::crossEntropyForward(x, ti, sum).first.itemDouble(), 3.1308757064102553, tol);
    EXPECT_TRUE(tensorsNear(kernels::crossEntropyBackward(Tensor::scalar(1.0, dt), x, pi, ti, mean),
                            Tensor::fromVector<double>(grad_mean_ignored, {3, 4}), 1e-7));
  }
}

// Masked logits (-inf, as a vocabulary mask leaves them): without smoothing the loss is the plain
// -log softmax at the target, finite while the target is not masked (torch's); with smoothing the
// -sum log p term is infinite. The gradient of a masked class is (about) 0. Every dtype and backend.
TEST(CrossEntropy, masked_logits_give_finite_losses_without_smoothing) {
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor x64 = Tensor::fromVector<double>({0.5, -inf, 2.0, 0.1, -inf, 1.5, -inf, 0.3}, {2, 4});
  const Tensor t = Tensor::fromVector<int64_t>({2, 1}, {2});
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    const Tensor x = x64.to(dt);
    kernels::CrossEntropyParams none{LossReduction::none, 0.0, -100};
    auto [loss, lse] = kernels::crossEntropyForward(x, t, none);
    const std::vector<double> got = loss.toVector<double>(), l = lse.toVector<double>();
    const double want0 = std::log(std::exp(0.5) + std::exp(2.0) + std::exp(0.1)) - 2.0;
    const double want1 = std::log(std::exp(1.5) + std::exp(0.3)) - 1.5;
    const double tol = dt == DType::bf16 ? 2e-2 : 1e-5;
    EXPECT_NEAR(got[0], want0, tol) << dtypeName(dt);
    EXPECT_NEAR(got[1], want1, tol) << dtypeName(dt);
    const Tensor g = kernels::crossEntropyBackward(
        Tensor::fromVector<double>({1.0, 1.0}, {2}).to(loss.dtype()), x, lse, t, none);
    // A masked class's gradient: 0 (the CPU's branch-free exp gives ~1e-38 for exp(-inf)).
    EXPECT_LE(std::abs(g.toVector<double>()[1]), 1e-30) << dtypeName(dt);
    EXPECT_TRUE(std::isfinite(l[0]) && std::isfinite(l[1])) << dtypeName(dt);
    kernels::CrossEntropyParams smooth{LossReduction::none, 0.1, -100};
    EXPECT_EQ(kernels::crossEntropyForward(x, t, smooth).first.toVector<double>()[0], inf) << dtypeName(dt);
  }
}

TEST(CrossEntropy, rejects_mismatched_shapes) {
  Tensor x = randomTensor({4, 5}, DType::f32);
  try {
    kernels::crossEntropyForward(x, Tensor::fromVector<int64_t>({1, 2, 3}, {3}), {});
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("cross_entropy"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[4, 5]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[3]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(kernels::crossEntropyForward(x, Tensor::fromVector<int64_t>({1, 2, 5, 0}, {4}), {}),
               ValueError);
  EXPECT_THROW(kernels::crossEntropyForward(x, Tensor::fromVector<int64_t>({1, 2, -1, 0}, {4}), {}),
               ValueError);
  EXPECT_THROW(kernels::crossEntropyForward(x, Tensor::fromVector<float>({1, 2, 3, 0}, {4}), {}), ValueError);
}

TEST(NllLoss, forward_and_backward_match_reference) {
  Tensor lp = kernels::logSoftmaxForward(torchLogits(DType::f32), 1);
  Tensor t = Tensor::fromVector<int64_t>({2, -100, 3}, {3});
  // torch 1.13: F.nll_loss(log_softmax(x), [2, -100, 3]) = 1.5379378532051275 (mean over the two kept rows).
  EXPECT_NEAR(kernels::nllLossForward(lp, t, LossReduction::mean, -100).itemDouble(), 1.5379378532051275,
              1e-5);
  for (auto r : {LossReduction::mean, LossReduction::sum, LossReduction::none}) {
    Tensor x = randomTensor({7, 4}, DType::f32, 1);
    Tensor tt = randomTargets(7, 4, 5, 3, -1);
    EXPECT_TRUE(tensorsNear(kernels::nllLossForward(x, tt, r, -1),
                            kernels::reference::kLoss.nllLossForward(x, tt, r, -1), 1e-6));
    Tensor g = r == LossReduction::none ? randomTensor({7}, DType::f32, 3) : Tensor::scalar(0.7);
    Tensor gx = kernels::nllLossBackward(g, tt, 4, r, -1);
    EXPECT_EQ(gx.shape(), (Shape{7, 4}));
    EXPECT_TRUE(tensorsNear(gx, kernels::reference::kLoss.nllLossBackward(g, tt, 4, r, -1), 1e-7));
  }
}

TEST(NllLoss, rejects_mismatched_shapes) {
  EXPECT_THROW(kernels::nllLossForward(randomTensor({4, 5}, DType::f32),
                                       Tensor::fromVector<int64_t>({1, 2}, {2}), LossReduction::mean, -100),
               ValueError);
  EXPECT_THROW(kernels::nllLossForward(randomTensor({2, 5}, DType::f32),
                                       Tensor::fromVector<int64_t>({1, 7}, {2}), LossReduction::mean, -100),
               ValueError);
}

TEST(MseLoss, forward_and_backward_match_reference) {
  for (const Shape& s : std::vector<Shape>{{1}, {3, 5}, {2, 3, 4}}) {
    Tensor a = randomTensor(s, DType::f32, 1), b = randomTensor(s, DType::f32, 2);
    for (auto r : {LossReduction::mean, LossReduction::sum, LossReduction::none}) {
      EXPECT_TRUE(tensorsNear(kernels::mseLossForward(a, b, r),
                              kernels::reference::kLoss.mseLossForward(a, b, r), 1e-6, 1e-6));
      Tensor g = r == LossReduction::none ? randomTensor(s, DType::f32, 3) : Tensor::scalar(0.7);
      EXPECT_TRUE(tensorsNear(kernels::mseLossBackward(g, a, b, r),
                              kernels::reference::kLoss.mseLossBackward(g, a, b, r), 1e-6, 1e-6));
    }
  }
  // Operands in different layouts take the general path.
  Tensor a = randomTensor({5, 3}, DType::f32, 1).transpose(0, 1), b = randomTensor({3, 5}, DType::f32, 2);
  for (auto r : {LossReduction::mean, LossReduction::none}) {
    EXPECT_TRUE(tensorsNear(kernels::mseLossForward(a, b, r),
                            kernels::reference::kLoss.mseLossForward(a, b, r), 1e-6, 1e-6));
    Tensor g = r == LossReduction::none ? randomTensor({3, 5}, DType::f32, 3) : Tensor::scalar(0.7);
    EXPECT_TRUE(tensorsNear(kernels::mseLossBackward(g, a, b, r),
                            kernels::reference::kLoss.mseLossBackward(g, a, b, r), 1e-6, 1e-6));
  }
  // mean of (1-0)^2 and (3-1)^2.
  EXPECT_DOUBLE_EQ(kernels::mseLossForward(Tensor::fromVector<double>({1, 3}, {2}),
                                           Tensor::fromVector<double>({0, 1}, {2}), LossReduction::mean)
                       .itemDouble(),
                   2.5);
}

TEST(MseLoss, rejects_mismatched_shapes) {
  try {
    kernels::mseLossForward(randomTensor({2, 3}, DType::f32), randomTensor({3, 2}, DType::f32),
                            LossReduction::mean);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 3]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[3, 2]"), std::string::npos) << e.what();
  }
}
