// The CUDA losses beyond gpu_ops_test.cpp's table (cross-entropy, NLL and MSE in every dtype and
// reduction): an out-of-range target, operands on two devices, wrong target dtypes. Skips without a
// GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "gpu_compare.h"
#include "lockstep/kernels.h"

using namespace lockstep;
using kernels::LossReduction;
using lockstep::testing::expectGpuClose;
using lockstep::testing::f64;
using lockstep::testing::gpu;
using lockstep::testing::gpuMatches;
using lockstep::testing::hostRandom;
using lockstep::testing::OpClass;
using lockstep::testing::oracle;
using lockstep::testing::roundedInput;
using lockstep::testing::Tol;
using lockstep::testing::tolFor;

namespace {
// Targets in [0, c) with every third row ignore_index (-100) when `ignore`.
Tensor targets(int64_t n, int64_t c, bool ignore) {
  std::vector<int64_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[i] = ignore && i % 3 == 1 ? -100 : (i * 7 + 3) % c;
  return Tensor::fromVector(t, {n});
}

// Reduced losses in bf16/f16 round a sum; f32 ones add in another order than the CPU.
Tol lossTol(DType t) {
  Tol tol = lockstep::testing::tolFor(t);
  if (t == DType::f32) tol = {1e-5, 1e-5};
  return tol;
}
}  // namespace

// Softmax's values are gpu_ops_test.cpp's cases.
TEST(GpuSoftmax, rejects_operands_on_different_devices) {
  LOCKSTEP_REQUIRE_GPU();
  Tensor x = hostRandom({3, 4}, DType::f32, 1);
  EXPECT_THROW(kernels::softmaxBackward(gpu(x), x, 1), ValueError);
}

TEST(GpuCrossEntropy, non_contiguous_logits_and_bad_input) {
  LOCKSTEP_REQUIRE_GPU();
  Tensor logits = hostRandom({10, 6}, DType::f32, 1).transpose(0, 1);
  Tensor tg = targets(6, 10, false);
  kernels::CrossEntropyParams p;
  const Tensor loss = oracle(kernels::crossEntropyForward(f64(logits), tg, p).first, DType::f32);
  auto [loss_dev, lse_dev] = kernels::crossEntropyForward(gpu(logits), gpu(tg), p);
  EXPECT_TRUE(gpuMatches(loss_dev, loss, lossTol(DType::f32)));
  // Operands on two devices, a target of the wrong dtype: errors. A target out of range cannot be
  // read on the host without a sync: its loss is NaN.
  EXPECT_THROW(kernels::crossEntropyForward(gpu(logits), tg, p), ValueError);
  EXPECT_THROW(kernels::crossEntropyForward(gpu(logits), gpu(tg.to(DType::i32)), p), ValueError);
  Tensor bad = Tensor::fromVector(std::vector<int64_t>{0, 1, 10, 2, 3, 4}, {6});
  EXPECT_TRUE(std::isnan(kernels::crossEntropyForward(gpu(logits), gpu(bad), p).first.item<double>()));
}

// The fused output layer + cross entropy on a GPU against the composed ops on the f64 values:
// vocabularies whose rows of logits are whole 16-byte runs and ones that are not (padded with -inf
// logits: 4,099 words -> 4,100 in f32, 4,104 in bf16 and f16), label smoothing (never padded),
// ignored rows, mean (the small case, its loss gradient 100 so that the gradients are O(1) against
// the bounds) and sum (gradient 0.75), and in f32 at 4,099 words two chunks of rows (8,064 rows of
// about 128 MiB of logits, then 236). bf16/f16 take one chunk of 16,256 rows, so 300 rows show their
// padding as well (8,300 cost the host's f64 oracle about 12 s a case).
TEST(GpuLinearCrossEntropy, matches_the_composed_ops_with_and_without_a_padded_vocabulary) {
  LOCKSTEP_REQUIRE_GPU();
  const int64_t c = 16;
  for (auto [rows, v] : std::vector<std::pair<int64_t, int64_t>>{{300, 1024}, {8300, 4099}}) {
    for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
      const int64_t n = dt == DType::f32 ? rows : std::min<int64_t>(rows, 300);
      const Tensor x = roundedInput({n, c}, dt, 1), w = roundedInput({v, c}, dt, 2);
      const Tensor tg = targets(n, v, true);
      for (double smoothing : {0.0, 0.1}) {
        const bool mean = v == 1024;
        const double gv = mean ? 100.0 : 0.75;
        kernels::CrossEntropyParams p{mean ? LossReduction::mean : LossReduction::sum, smoothing, -100};
        p.f32_loss = dt != DType::f32;
        const std::string what =
            std::string(dtypeName(dt)) + " vocab " + std::to_string(v) + (smoothing > 0 ? " smoothed" : "");
        // The oracle: the composed ops on the f64 values.
        kernels::CrossEntropyParams p64 = p;
        p64.f32_loss = false;
        const Tensor logits = kernels::linearForward(f64(x), f64(w), Tensor());
        auto [want, lse] = kernels::crossEntropyForward(logits, tg, p64);
        const Tensor g = Tensor::scalar(gv, DType::f64);
        const Tensor dlogits = kernels::crossEntropyBackward(g, logits, lse, tg, p64);
        const Tensor want_dx = kernels::linearBackwardData(dlogits, f64(w));
        const Tensor want_dw = kernels::linearBackwardWeights(dlogits, f64(x), false).first;

        kernels::LinearCrossEntropy fused =
            kernels::linearCrossEntropyForward(gpu(x), gpu(w), gpu(tg), p, true);
        const DType loss_dtype = p.f32_loss ? DType::f32 : dt;
        expectGpuClose(fused.loss, want, loss_dtype, lossTol(dt), what + " loss");
        auto [dx, dw] = kernels::linearCrossEntropyBackward(gpu(Tensor::scalar(gv, loss_dtype)), fused,
                                                            gpu(x), v, true, true);
        const Tol t = tolFor(dt, OpClass::gemm);
        EXPECT_TRUE(gpuMatches(dx.to(DType::f64), want_dx, t, what + " dx"));
        EXPECT_TRUE(gpuMatches(dw.to(DType::f64), want_dw, t, what + " dw"));
        EXPECT_EQ(dx.dtype(), dt) << what;
        EXPECT_EQ(dw.dtype(), dt) << what;
        EXPECT_EQ(dw.shape(), w.shape()) << what;
      }
    }
  }
}

// A target in the padding (4,099 words padded to 4,104 bf16 columns) is out of range, NaN as the
// unpadded op's and not the +inf of its -inf logit; no rows at all: the mean's NaN.
TEST(GpuLinearCrossEntropy, a_target_in_the_padding_and_no_rows_give_what_the_unpadded_op_does) {
  LOCKSTEP_REQUIRE_GPU();
  const int64_t c = 16, v = 4099;
  const Tensor w = roundedInput({v, c}, DType::bf16, 2), x = roundedInput({4, c}, DType::bf16, 1);
  kernels::CrossEntropyParams p{LossReduction::sum, 0.0, -100};
  p.f32_loss = true;
  const Tensor in_padding = Tensor::fromVector<int64_t>({0, 4100, 1, 2}, {4});
  const auto bad = kernels::linearCrossEntropyForward(gpu(x), gpu(w), gpu(in_padding), p, true);
  EXPECT_TRUE(std::isnan(bad.loss.itemDouble())) << bad.loss.itemDouble();
  p.reduction = LossReduction::mean;
  const auto none = kernels::linearCrossEntropyForward(gpu(Tensor::zeros({0, c}, DType::bf16)), gpu(w),
                                                       gpu(Tensor::fromVector<int64_t>({}, {0})), p, true);
  EXPECT_TRUE(std::isnan(none.loss.itemDouble())) << none.loss.itemDouble();
}

TEST(GpuMseLoss, rejects_operands_on_different_devices) {
  LOCKSTEP_REQUIRE_GPU();
  Tensor a = hostRandom({3}, DType::f32, 1);
  EXPECT_THROW(kernels::mseLossForward(gpu(a), a, LossReduction::mean), ValueError);
}

// The fused LM head writes each chunk's logit gradient straight into its kept [N, V] gradient, and
// may write it over the logits themselves: both give crossEntropyBackward's bytes. A host buffer, or
// one of another dtype, is left to the caller.
TEST(GpuCrossEntropy, backward_into_a_buffer_or_over_the_logits_is_the_backward) {
  LOCKSTEP_REQUIRE_GPU();
  for (DType t : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtypeName(t));
    Tensor logits = gpu(hostRandom({37, 1000}, t, 1, -4.0, 4.0));
    std::vector<int64_t> tv(37);
    for (int64_t i = 0; i < 37; ++i) tv[static_cast<size_t>(i)] = i == 5 ? -100 : (i * 131) % 1000;
    Tensor target = gpu(Tensor::fromVector<int64_t>(tv, {37}));
    kernels::CrossEntropyParams p;
    auto [loss, lse] = kernels::crossEntropyForward(logits, target, p);
    Tensor gloss = gpu(Tensor::scalar(0.75, loss.dtype()));
    const Tensor want = kernels::crossEntropyBackward(gloss, logits, lse, target, p).to(Device::cpu());
    Tensor out = Tensor::empty({37, 1000}, t, MemoryFormat::contiguous, Device::cuda(0));
    ASSERT_TRUE(kernels::crossEntropyBackwardInto(out, gloss, logits, lse, target, p));
    EXPECT_TRUE(gpuMatches(out, want, lockstep::testing::kExact, "into a buffer"));
    Tensor over = logits.clone();
    ASSERT_TRUE(kernels::crossEntropyBackwardInto(over, gloss, over, lse, target, p));
    EXPECT_TRUE(gpuMatches(over, want, lockstep::testing::kExact, "over the logits"));
    Tensor host = Tensor::empty({37, 1000}, t);
    EXPECT_FALSE(kernels::crossEntropyBackwardInto(host, gloss, logits, lse, target, p));
    Tensor narrow = Tensor::empty({37, 1000}, t == DType::f32 ? DType::bf16 : DType::f32,
                                  MemoryFormat::contiguous, Device::cuda(0));
    EXPECT_FALSE(kernels::crossEntropyBackwardInto(narrow, gloss, logits, lse, target, p));
  }
}

// The loss and its gradient in one pass (the fused LM head's chunks): the bytes of the forward
// followed by the backward, for short rows (a warp each) and long ones (a block each: GPT-2's
// vocabulary), with an ignored row, label smoothing and f32 losses of bf16 logits; only a reduction
// none into a contiguous GPU buffer of the logits' dtype is taken.
TEST(GpuCrossEntropy, loss_and_gradient_in_one_pass_equal_forward_then_backward) {
  LOCKSTEP_REQUIRE_GPU();
  // Variant 1: a padded vocabulary's -inf logits (the last 7 columns, no smoothing) and the loss in
  // the logits' dtype.
  for (int variant : {0, 1}) {
    for (DType t : {DType::f32, DType::bf16}) {
      for (int64_t c : {int64_t{300}, int64_t{50264}}) {
        const std::string what =
            std::string(dtypeName(t)) + " C=" + std::to_string(c) + (variant == 1 ? ", -inf logits" : "");
        const int64_t n = 19;
        Tensor host_logits = hostRandom({n, c}, t, 2, -4.0, 4.0);
        if (variant == 1) host_logits.narrow(1, c - 7, 7).fill(-std::numeric_limits<double>::infinity());
        Tensor logits = gpu(host_logits);
        std::vector<int64_t> tv(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) tv[static_cast<size_t>(i)] = i == 3 ? -100 : (i * 7919) % (c - 7);
        Tensor target = gpu(Tensor::fromVector<int64_t>(tv, {n}));
        kernels::CrossEntropyParams p;
        p.reduction = LossReduction::none;
        p.label_smoothing = variant == 1 ? 0.0 : 0.1;
        p.f32_loss = t == DType::bf16 && variant == 0;
        Tensor row_grad = gpu(hostRandom({n}, DType::f32, 3, 0.1, 2.0));
        auto [loss, lse] = kernels::crossEntropyForward(logits, target, p);
        const Tensor want = kernels::crossEntropyBackward(row_grad, logits, lse, target, p);
        Tensor out = Tensor::empty({n, c}, t, MemoryFormat::contiguous, Device::cuda(0));
        auto both = kernels::crossEntropyWithGradInto(out, row_grad, logits, target, p);
        ASSERT_TRUE(both.has_value()) << what;
        EXPECT_TRUE(
            gpuMatches(both->first, loss.to(Device::cpu()), lockstep::testing::kExact, what + " loss"));
        EXPECT_TRUE(
            gpuMatches(both->second, lse.to(Device::cpu()), lockstep::testing::kExact, what + " lse"));
        EXPECT_TRUE(gpuMatches(out, want.to(Device::cpu()), lockstep::testing::kExact, what + " gradient"));
        kernels::CrossEntropyParams mean = p;
        mean.reduction = LossReduction::mean;
        EXPECT_FALSE(kernels::crossEntropyWithGradInto(out, row_grad, logits, target, mean).has_value());
        Tensor host = Tensor::empty({n, c}, t);
        EXPECT_FALSE(kernels::crossEntropyWithGradInto(host, row_grad, logits, target, p).has_value());
        if (variant == 1) {
          const std::vector<float> gv = out.to(Device::cpu()).to(DType::f32).toVector<float>();
          EXPECT_TRUE(std::all_of(gv.begin(), gv.end(), [](float v) { return std::isfinite(v); }))
              << what << ": -inf logits gave a non-finite gradient";
        }
      }
    }
  }
}
