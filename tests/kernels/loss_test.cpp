#include "lockstep/kernels/tables/loss.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>

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

double maxAbs(const Tensor& t) {
  double m = 0;
  for (double v : t.toVector<double>()) m = std::max(m, std::abs(v));
  return m;
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

// The fused output layer + cross entropy against the composed ops: the loss, x's and the weight's
// gradients for a loss gradient g. The vocabulary makes the CPU take several chunks of rows (64 MiB
// of f32 logits a chunk: 48 rows at 300,001 words), the last one short. On the reference kernels
// (plain loops, about 50x slower at these GEMMs) one combination of the options covers their
// GEMMs: the chunking and the options are the fused op's own, checked on oneDNN's.
TEST(LinearCrossEntropy, equals_the_linear_layer_then_cross_entropy_chunk_by_chunk) {
  const int64_t n = 101, c = 16, v = 300001;
  const Tensor x = randomTensor({n, c}, DType::f32, 5, -1, 1), w = randomTensor({v, c}, DType::f32, 6, -1, 1);
  const Tensor logits = kernels::linearForward(x, w, Tensor());
  const bool reference = kernels::backendFor(DType::f32) == kernels::Backend::reference;
  for (int64_t ignore_every : {4, 0}) {
    const Tensor t = randomTargets(n, v, 7, ignore_every);
    for (auto r : {LossReduction::mean, LossReduction::sum}) {
      for (double s : {0.1, 0.0}) {
        if (reference && (ignore_every == 0 || r == LossReduction::sum || s == 0.0)) continue;
        kernels::CrossEntropyParams p{r, s, -100};
        auto [want, lse] = kernels::crossEntropyForward(logits, t, p);
        const Tensor g = Tensor::scalar(0.7);
        const Tensor dlogits = kernels::crossEntropyBackward(g, logits, lse, t, p);
        const Tensor want_dx = kernels::linearBackwardData(dlogits, w);
        const Tensor want_dw = kernels::linearBackwardWeights(dlogits, x, false).first;

        kernels::LinearCrossEntropy fused = kernels::linearCrossEntropyForward(x, w, t, p, true);
        ASSERT_EQ(fused.loss.shape(), Shape{});
        ASSERT_EQ(fused.loss.dtype(), DType::f32);
        EXPECT_TRUE(tensorsNear(fused.loss, want, 1e-6, 1e-6))
            << fused.loss.itemDouble() << " vs " << want.itemDouble();
        auto [dx, dw] = kernels::linearCrossEntropyBackward(g, fused, x, v, true, true);
        ASSERT_EQ(dw.shape(), w.shape());
        // The sums over 300,001 words cancel (the softmax adds up to the target's 1): bounds
        // relative to the largest entry.
        EXPECT_TRUE(tensorsNear(dx, want_dx, 1e-5 * maxAbs(want_dx), 1e-5));
        EXPECT_TRUE(tensorsNear(dw, want_dw, 1e-5 * maxAbs(want_dw), 1e-5));
        // Without the gradient only the loss is taken.
        kernels::LinearCrossEntropy loss_only = kernels::linearCrossEntropyForward(x, w, t, p, false);
        EXPECT_FALSE(loss_only.grad_logits.defined());
        EXPECT_TRUE(tensorsNear(loss_only.loss, fused.loss, 0, 0));
      }
    }
  }
}

// f64 (the gradient checks' dtype) and bf16 with f32_loss (autocast's) give what the composed ops
// give; a mean over no kept rows is NaN, as cross entropy's is, with zero gradients.
TEST(LinearCrossEntropy, keeps_the_composed_ops_dtypes_and_edge_cases) {
  const int64_t n = 9, c = 8, v = 30;
  const Tensor t = randomTargets(n, v, 3, 3);
  for (DType dt : {DType::f64, DType::bf16}) {
    const Tensor x = randomTensor({n, c}, DType::f32, 1).to(dt),
                 w = randomTensor({v, c}, DType::f32, 2).to(dt);
    kernels::CrossEntropyParams p{LossReduction::mean, 0.0, -100};
    p.f32_loss = dt == DType::bf16;
    const Tensor logits = kernels::linearForward(x, w, Tensor());
    auto [want, lse] = kernels::crossEntropyForward(logits, t, p);
    kernels::LinearCrossEntropy fused = kernels::linearCrossEntropyForward(x, w, t, p, true);
    ASSERT_EQ(fused.loss.dtype(), want.dtype()) << dtypeName(dt);
    EXPECT_TRUE(tensorsNear(fused.loss, want, dt == DType::f64 ? 1e-14 : 1e-6, 1e-6)) << dtypeName(dt);
    const Tensor g = Tensor::scalar(1.0, want.dtype());
    const Tensor dlogits = kernels::crossEntropyBackward(g, logits, lse, t, p);
    auto [dx, dw] = kernels::linearCrossEntropyBackward(g, fused, x, v, true, true);
    ASSERT_EQ(dx.dtype(), dt);
    ASSERT_EQ(dw.dtype(), dt);
    const double tol = dt == DType::f64 ? 1e-14 : 2e-2;
    EXPECT_TRUE(tensorsNear(dx, kernels::linearBackwardData(dlogits, w), tol, tol)) << dtypeName(dt);
    EXPECT_TRUE(tensorsNear(dw, kernels::linearBackwardWeights(dlogits, x, false).first, tol, tol))
        << dtypeName(dt);
  }
  const Tensor x = randomTensor({3, 4}, DType::f32, 1), w = randomTensor({5, 4}, DType::f32, 2);
  const Tensor ignored = Tensor::fromVector<int64_t>({-100, -100, -100}, {3});
  kernels::LinearCrossEntropy none_kept =
      kernels::linearCrossEntropyForward(x, w, ignored, {LossReduction::mean, 0.0, -100}, true);
  EXPECT_TRUE(std::isnan(none_kept.loss.itemDouble()));
  auto [dx, dw] = kernels::linearCrossEntropyBackward(Tensor::scalar(1.0), none_kept, x, 5, true, true);
  EXPECT_TRUE(tensorsNear(dx, Tensor::zeros({3, 4}), 0, 0));
  EXPECT_TRUE(tensorsNear(dw, Tensor::zeros({5, 4}), 0, 0));
  EXPECT_EQ(kernels::linearCrossEntropyForward(x, w, ignored, {LossReduction::sum, 0.0, -100}, false)
                .loss.itemDouble(),
            0.0);
  // No rows at all: the mean is 0 / 0 (PyTorch's NaN), the sum 0, as the composed ops give.
  const Tensor no_rows = Tensor::zeros({0, 4}), no_targets = Tensor::fromVector<int64_t>({}, {0});
  const kernels::CrossEntropyParams mean{LossReduction::mean, 0.0, -100};
  EXPECT_TRUE(
      std::isnan(kernels::linearCrossEntropyForward(no_rows, w, no_targets, mean, true).loss.itemDouble()));
  EXPECT_TRUE(
      std::isnan(kernels::crossEntropyForward(kernels::linearForward(no_rows, w, Tensor()), no_targets, mean)
                     .first.itemDouble()));
  EXPECT_EQ(kernels::linearCrossEntropyForward(no_rows, w, no_targets, {LossReduction::sum, 0.0, -100}, false)
                .loss.itemDouble(),
            0.0);
}

TEST(CrossEntropy, classes_narrower_than_the_rows_take_the_rest_as_out_of_range) {
  // CrossEntropyParams::classes: logits padded beyond the vocabulary (linearCrossEntropy's padded
  // GPU GEMMs) with -inf; a target in the padding is out of range, as without it.
  std::vector<double> v = {0.5, -1.0, 2.0, -INFINITY, -INFINITY, 1.0, 0.0, -0.5, -INFINITY, -INFINITY};
  const Tensor padded = Tensor::fromVector(v, {2, 5});
  const Tensor unpadded = padded.narrow(1, 0, 3).contiguous();
  const Tensor t = Tensor::fromVector<int64_t>({2, 0}, {2});
  kernels::CrossEntropyParams p{LossReduction::mean, 0.0, -100};
  p.classes = 3;
  auto [loss, lse] = kernels::crossEntropyForward(padded, t, p);
  const auto want = kernels::crossEntropyForward(unpadded, t, {LossReduction::mean, 0.0, -100}).first;
  EXPECT_NEAR(loss.itemDouble(), want.itemDouble(), 1e-15);
  const Tensor g = kernels::crossEntropyBackward(Tensor::scalar(1.0, DType::f64), padded, lse, t, p);
  for (double x : g.narrow(1, 3, 2).contiguous().toVector<double>()) EXPECT_EQ(x, 0.0);  // nor the padding
  const Tensor in_padding = Tensor::fromVector<int64_t>({3, 0}, {2});
  try {
    kernels::crossEntropyForward(padded, in_padding, p);
    ADD_FAILURE() << "a target in the padding was taken";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("target 3 at index 0 is out of range for 3 classes"),
              std::string::npos)
        << e.what();
  }
  p.classes = 6;
  EXPECT_THROW(kernels::crossEntropyForward(padded, t, p), ValueError);
}

TEST(LinearCrossEntropy, refuses_what_it_cannot_do_by_name) {
  const Tensor x = randomTensor({3, 4}, DType::f32, 1), w = randomTensor({5, 4}, DType::f32, 2);
  const Tensor t = Tensor::fromVector<int64_t>({0, 1, 2}, {3});
  auto refuses = [](const std::function<void()>& f, const std::string& what) {
    try {
      f();
    } catch (const ValueError& e) {
      return std::string(e.what()).find(what) != std::string::npos;
    }
    return false;
  };
  EXPECT_TRUE(refuses(
      [&] {
        kernels::linearCrossEntropyForward(x, w, t, {LossReduction::none, 0.0, -100}, true);
      },
      "reduction none"));
  EXPECT_TRUE(refuses([&] { kernels::linearCrossEntropyForward(x, w.to(DType::f64), t, {}, true); },
                      "weight [V, C]"));
  EXPECT_TRUE(refuses(
      [&] {
        kernels::linearCrossEntropyForward(x, randomTensor({5, 3}), t, {}, true);
      },
      "weight [V, C]"));
  EXPECT_TRUE(refuses([&] { kernels::linearCrossEntropyForward(x, w, t.slice(0, 2), {}, true); }, "target"));
  const Tensor out_of_range = Tensor::fromVector<int64_t>({0, 5, 2}, {3});
  EXPECT_TRUE(
      refuses([&] { kernels::linearCrossEntropyForward(x, w, out_of_range, {}, true); }, "out of range"));
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

// Writing the gradient into a given buffer is a GPU's form; on the CPU it says so and writes nothing.
TEST(CrossEntropy, backward_into_a_buffer_is_left_to_the_caller_on_the_cpu) {
  Tensor logits = randomTensor({4, 7}, DType::f32, 1);
  Tensor target = Tensor::fromVector<int64_t>({1, 0, 6, 3}, {4});
  kernels::CrossEntropyParams p;
  auto [loss, lse] = kernels::crossEntropyForward(logits, target, p);
  Tensor out = Tensor::zeros({4, 7});
  EXPECT_FALSE(kernels::crossEntropyBackwardInto(out, Tensor::scalar(1.0), logits, lse, target, p));
  EXPECT_EQ(out.toVector<float>(), std::vector<float>(28, 0.0f));
}
