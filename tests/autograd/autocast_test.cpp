// The autocast policy (autograd/autocast.h): which ops cast to the lower precision, which to f32,
// which promote, that parameters stay f32 and are cast once per scope, and that gradients reach
// the parameters in f32 close to the f32 ones.
#include <optional>

#include "common/check.h"
#include "lockstep/autograd.h"

using namespace lockstep;
using autograd::AutocastGuard;
using autograd::Variable;
using lockstep::testing::randomTensor;
using lockstep::testing::tensorsNear;

namespace {
Variable param(const Shape& s, uint64_t seed) { return Variable(randomTensor(s, DType::f32, seed), true); }
Variable input(const Shape& s, uint64_t seed) { return Variable(randomTensor(s, DType::f32, seed)); }
}  // namespace

TEST(Autocast, lower_precision_ops_run_in_the_autocast_dtype) {
  Variable w = param({8, 16}, 1), b = param({8}, 2), x = input({4, 16}, 3);
  Variable cw = param({6, 3, 3, 3}, 4), img = input({2, 3, 8, 8}, 5);
  for (DType low : {DType::bf16, DType::f16}) {
    AutocastGuard autocast(low);
    EXPECT_EQ(autograd::linear(x, w, b).dtype(), low);
    EXPECT_EQ(autograd::matmul(x, autograd::transpose(w, 0, 1)).dtype(), low);
    EXPECT_EQ(autograd::conv2d(img, cw, Variable(), {}).dtype(), low);
  }
  EXPECT_EQ(autograd::linear(x, w, b).dtype(), DType::f32) << "outside the scope nothing is cast";
}

TEST(Autocast, f32_ops_widen_their_inputs) {
  AutocastGuard autocast(DType::bf16);
  Variable h = autograd::linear(input({4, 16}, 3), param({10, 16}, 1), param({10}, 2));
  ASSERT_EQ(h.dtype(), DType::bf16);
  EXPECT_EQ(autograd::softmax(h, 1).dtype(), DType::f32);
  EXPECT_EQ(autograd::logSoftmax(h, 1).dtype(), DType::f32);
  EXPECT_EQ(autograd::sum(h).dtype(), DType::f32);
  EXPECT_EQ(autograd::mean(h, {1}).dtype(), DType::f32);
  EXPECT_EQ(autograd::layerNorm(h, {10}, param({10}, 4), param({10}, 5)).dtype(), DType::f32);
  Tensor target = Tensor::fromVector<int64_t>({1, 2, 3, 4}, {4});
  EXPECT_EQ(autograd::crossEntropy(h, target).dtype(), DType::f32);
  EXPECT_EQ(autograd::mseLoss(h, input({4, 10}, 6)).dtype(), DType::f32);
}

// The loss on bf16/f16 logits is not cast to f32 first (the kernels read them as they are), yet
// gives what the cast would: the f32 loss, and the gradient rounded once to the logits' dtype.
TEST(Autocast, cross_entropy_reads_narrow_logits_as_if_cast_to_f32) {
  Tensor target = Tensor::fromVector<int64_t>({1, -100, 3, 0, 9}, {5});
  for (DType low : {DType::bf16, DType::f16}) {
    for (autograd::Reduction r : {autograd::Reduction::mean, autograd::Reduction::none}) {
      autograd::CrossEntropyOptions o;
      o.reduction = r;
      o.label_smoothing = 0.1;
      Variable logits(randomTensor({5, 10}, DType::f32, 8, -4, 4).to(low), true);
      Variable loss;
      {
        AutocastGuard autocast(low);
        loss = autograd::crossEntropy(logits, target, o);
      }
      ASSERT_EQ(loss.dtype(), DType::f32);
      autograd::sum(loss).backward();
      ASSERT_EQ(logits.grad().dtype(), low);
      // The same, cast by hand outside autocast.
      Variable wide(logits.tensor(), true);
      Variable want = autograd::crossEntropy(autograd::toDType(wide, DType::f32), target, o);
      autograd::sum(want).backward();
      EXPECT_TRUE(tensorsNear(loss.tensor(), want.tensor(), 0, 0)) << dtypeName(low);
      EXPECT_TRUE(tensorsNear(logits.grad(), wide.grad(), 0, 0)) << dtypeName(low);
    }
  }
}

// layerNormLowered = autocast::lower(layerNorm(...)) in one op: the same values and gradients (the
// reader's cast rounds the same f32 values), and layerNorm itself outside autocast.
TEST(Autocast, layer_norm_lowered_equals_layer_norm_then_the_readers_cast) {
  for (bool autocast : {true, false}) {
    Variable x = param({4, 16}, 1), w = param({16}, 2), b = param({16}, 3), lw = param({8, 16}, 4);
    Variable x2(x.tensor(), true), w2(w.tensor(), true), b2(b.tensor(), true), lw2(lw.tensor(), true);
    Variable y, want;
    {
      std::optional<AutocastGuard> scope;
      if (autocast) scope.emplace(DType::bf16);
      y = autograd::linear(autograd::layerNormLowered(x, {16}, w, b), lw, Variable());
      want = autograd::linear(autograd::layerNorm(x2, {16}, w2, b2), lw2, Variable());
    }
    ASSERT_EQ(y.dtype(), autocast ? DType::bf16 : DType::f32);
    EXPECT_TRUE(tensorsNear(y.tensor(), want.tensor(), 0, 0));
    Tensor g = randomTensor({4, 8}, DType::f32, 5).to(y.dtype());
    y.backward(g);
    want.backward(g);
    for (auto [got, ref] : {std::pair{x, x2}, {w, w2}, {b, b2}, {lw, lw2}}) {
      EXPECT_TRUE(tensorsNear(got.grad(), ref.grad(), 0, 0)) << (autocast ? "autocast" : "plain");
    }
  }
}

TEST(Autocast, rms_norm_lowered_equals_rms_norm_then_the_readers_cast) {
  for (bool autocast : {true, false}) {
    Variable x = param({4, 16}, 1), w = param({16}, 2), lw = param({8, 16}, 4), lw2 = param({6, 16}, 5);
    Variable xr(x.tensor(), true), wr(w.tensor(), true), lwr(lw.tensor(), true), lw2r(lw2.tensor(), true);
    Variable y, want;
    {
      std::optional<AutocastGuard> scope;
      if (autocast) scope.emplace(DType::bf16);
      // One reader, as Llama's head (with two, the lowered gradients would add in bf16).
      Variable n = autograd::rmsNormLowered(x, w), nr = autograd::rmsNorm(xr, wr);
      y = autograd::sum(autograd::linear(n, lw, Variable())) +
          autograd::sum(autograd::linear(x, lw2, Variable()));
      want = autograd::sum(autograd::linear(nr, lwr, Variable())) +
             autograd::sum(autograd::linear(xr, lw2r, Variable()));
    }
    EXPECT_TRUE(tensorsNear(y.tensor(), want.tensor(), 0, 0));
    y.backward();
    want.backward();
    for (auto [got, ref] : {std::pair{x, xr}, {w, wr}, {lw, lwr}, {lw2, lw2r}}) {
      EXPECT_TRUE(tensorsNear(got.grad(), ref.grad(), 0, 0)) << (autocast ? "autocast" : "plain");
    }
  }
}

TEST(Autocast, other_ops_keep_their_dtype_and_mixed_arithmetic_promotes) {
  AutocastGuard autocast(DType::bf16);
  Variable h = autograd::linear(input({4, 16}, 3), param({10, 16}, 1), Variable());
  EXPECT_EQ(autograd::relu(h).dtype(), DType::bf16);
  EXPECT_EQ(autograd::gelu(h).dtype(), DType::bf16);
  EXPECT_EQ(autograd::reshape(h, {40}).dtype(), DType::bf16);
  EXPECT_EQ((h + h).dtype(), DType::bf16);
  EXPECT_EQ((h + input({4, 10}, 7)).dtype(), DType::f32) << "bf16 + f32 meets in f32";
  EXPECT_EQ((input({4, 10}, 7) * h).dtype(), DType::f32);
}

// A residual add of an f32 stream and a bf16 layer output: the f32 sum, and each operand's gradient in
// its own dtype, bit for bit what casting the bf16 operand first gives.
TEST(Autocast, mixed_add_and_sub_equal_casting_first) {
  for (bool subtract : {false, true}) {
    Variable x(randomTensor({6, 40}, DType::f32, 8), true);
    Variable h(randomTensor({6, 40}, DType::bf16, 9), true);
    Variable y = subtract ? x - h : h + x;
    EXPECT_EQ(y.dtype(), DType::f32);
    Tensor w = randomTensor({6, 40}, DType::f32, 10);
    autograd::sum(y * Variable(w)).backward();
    Variable x2(x.tensor().clone(), true), h2(h.tensor().clone(), true);
    Variable h2w = autograd::toDType(h2, DType::f32);
    Variable y2 = subtract ? x2 - h2w : h2w + x2;
    autograd::sum(y2 * Variable(w)).backward();
    EXPECT_TRUE(tensorsNear(y.tensor(), y2.tensor(), 0, 0));
    ASSERT_EQ(h.grad().dtype(), DType::bf16);
    ASSERT_EQ(x.grad().dtype(), DType::f32);
    EXPECT_TRUE(tensorsNear(h.grad(), h2.grad(), 0, 0));
    EXPECT_TRUE(tensorsNear(x.grad(), x2.grad(), 0, 0));
  }
}

TEST(Autocast, parameters_stay_f32_and_are_cast_once_per_forward) {
  Variable w = param({16, 16}, 1), b = param({16}, 2);
  Variable x = input({4, 16}, 3);
  {
    AutocastGuard autocast(DType::bf16);
    Variable h = x;
    for (int layer = 0; layer < 3; ++layer) h = autograd::linear(h, w, b);  // the same weights thrice
    EXPECT_EQ(autograd::autocast::castCacheMisses(), 2u) << "w and b are cast once each";
    autograd::sum(h).backward();
  }
  EXPECT_EQ(w.dtype(), DType::f32);
  ASSERT_TRUE(w.hasGrad());
  EXPECT_EQ(w.grad().dtype(), DType::f32) << "the gradient reaches the master weight in f32";
  EXPECT_EQ(b.grad().dtype(), DType::f32);
}

TEST(Autocast, a_second_forward_in_one_scope_recasts_after_backward) {
  Variable w = param({8, 8}, 1);
  AutocastGuard autocast(DType::bf16);
  autograd::sum(autograd::linear(input({2, 8}, 2), w, Variable())).backward();
  Tensor first = w.grad().clone();
  w.zeroGrad();
  // The cached cast's graph was freed by that backward: a second pass must still reach w.
  autograd::sum(autograd::linear(input({2, 8}, 2), w, Variable())).backward();
  EXPECT_TRUE(tensorsNear(w.grad(), first, 0, 0));
}

TEST(Autocast, nested_disabled_scope_turns_casting_off) {
  Variable w = param({8, 16}, 1), x = input({4, 16}, 3);
  AutocastGuard outer(DType::bf16);
  {
    AutocastGuard off(DType::bf16, false);
    EXPECT_FALSE(autograd::autocastDType().has_value());
    EXPECT_EQ(autograd::linear(x, w, Variable()).dtype(), DType::f32);
  }
  EXPECT_EQ(autograd::autocastDType(), DType::bf16);
  EXPECT_EQ(autograd::linear(x, w, Variable()).dtype(), DType::bf16);
}

TEST(Autocast, rejects_a_dtype_that_is_not_lower_precision) {
  EXPECT_THROW(AutocastGuard(DType::f32), ValueError);
  EXPECT_THROW(AutocastGuard(DType::f64), ValueError);
}

TEST(Autocast, gradients_of_a_small_network_are_close_to_f32) {
  // conv -> relu -> avg pool -> linear -> cross entropy, in f32 and under bf16 / f16 autocast.
  Variable cw = param({8, 3, 3, 3}, 1), cb = param({8}, 2), lw = param({5, 8 * 3 * 3}, 3), lb = param({5}, 4);
  Variable x = input({6, 3, 8, 8}, 5);
  Tensor target = Tensor::fromVector<int64_t>({0, 1, 2, 3, 4, 0}, {6});
  auto run = [&](std::optional<DType> low) {
    for (auto* p : {&cw, &cb, &lw, &lb}) p->zeroGrad();
    std::optional<AutocastGuard> guard;
    if (low) guard.emplace(*low);
    Variable h = autograd::conv2d(x, cw, cb, {});
    h = autograd::avgPool2d(autograd::relu(h), {});  // max pooling would route by near-ties
    Variable loss = autograd::crossEntropy(autograd::linear(autograd::flatten(h), lw, lb), target);
    guard.reset();
    loss.backward();
    return std::vector<Tensor>{loss.tensor(), cw.grad().clone(), cb.grad().clone(), lw.grad().clone(),
                               lb.grad().clone()};
  };
  auto ref = run(std::nullopt);
  for (auto [low, tol] : {std::pair{DType::bf16, 3e-2}, std::pair{DType::f16, 4e-3}}) {
    SCOPED_TRACE(dtypeName(low));
    auto got = run(low);
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].dtype(), DType::f32) << i;
      double scale = 0;
      for (double v : ref[i].toVector<double>()) scale = std::max(scale, std::abs(v));
      EXPECT_TRUE(tensorsNear(got[i], ref[i], tol * scale, 0)) << "tensor " << i;
    }
  }
}
