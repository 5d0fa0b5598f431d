// The CUDA losses (cross-entropy with label smoothing and ignore_index, NLL, MSE) against the CPU
// kernels (softmax's values: gpu_ops_test.cpp): every floating dtype, every reduction, short (warp) and long
// (block) rows, non-contiguous operands, and the errors. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>

#include "gpu_compare.h"
#include "lockstep/kernels.h"

using namespace lockstep;
using kernels::LossReduction;
using lockstep::testing::f64;
using lockstep::testing::gpu;
using lockstep::testing::gpuMatches;
using lockstep::testing::hostRandom;
using lockstep::testing::kFloatDTypes;
using lockstep::testing::oracle;
using lockstep::testing::Tol;

namespace {
const LossReduction kReductions[] = {LossReduction::none, LossReduction::mean, LossReduction::sum};

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

TEST(GpuCrossEntropy, matches_cpu_with_smoothing_ignore_index_and_every_reduction) {
  LOCKSTEP_REQUIRE_GPU();
  for (DType t : kFloatDTypes) {
    for (auto [n, c] : std::vector<std::pair<int64_t, int64_t>>{{7, 10}, {33, 1000}, {5, 5003}, {1, 1}}) {
      Tensor logits = hostRandom({n, c}, t, 3, -5, 5);
      for (bool ignore : {false, true}) {
        Tensor tg = targets(n, c, ignore);
        for (LossReduction r : kReductions) {
          for (double smoothing : {0.0, 0.1}) {
            kernels::CrossEntropyParams p;
            p.reduction = r;
            p.label_smoothing = smoothing;
            const std::string what = std::string(dtypeName(t)) + " [" + std::to_string(n) + ", " +
                                     std::to_string(c) + "] reduction " + std::to_string(int(r)) +
                                     (ignore ? " ignore" : "") + " smoothing " + std::to_string(smoothing);
            // Values against the f64 oracle (exp and log: gpu_ops_test.cpp's softmax), rounded to
            // the dtypes of the CPU kernel's results (the lse is f32 for bf16/f16 logits).
            auto [loss_cpu, lse_cpu] = kernels::crossEntropyForward(logits, tg, p);
            auto [loss64, lse64] = kernels::crossEntropyForward(f64(logits), tg, p);
            auto [loss_dev, lse_dev] = kernels::crossEntropyForward(gpu(logits), gpu(tg), p);
            EXPECT_TRUE(gpuMatches(loss_dev, oracle(loss64, loss_cpu.dtype()), lossTol(t), what));
            EXPECT_TRUE(
                gpuMatches(lse_dev, oracle(lse64, lse_cpu.dtype()), lossTol(lse_cpu.dtype()), what + " lse"));
            Tensor gloss = r == LossReduction::none ? hostRandom({n}, loss_cpu.dtype(), 5)
                                                    : Tensor::scalar(0.75, loss_cpu.dtype());
            EXPECT_TRUE(
                gpuMatches(kernels::crossEntropyBackward(gpu(gloss), gpu(logits), lse_dev, gpu(tg), p),
                           oracle(kernels::crossEntropyBackward(f64(gloss), f64(logits), lse64, tg, p), t),
                           what + " backward"));
          }
        }
      }
    }
  }
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

TEST(GpuNllLoss, forward_and_backward_match_cpu) {
  LOCKSTEP_REQUIRE_GPU();
  for (DType t : kFloatDTypes) {
    Tensor lp = kernels::logSoftmaxForward(hostRandom({9, 7}, t, 2, -3, 3), 1);
    for (bool ignore : {false, true}) {
      Tensor tg = targets(9, 7, ignore);
      for (LossReduction r : kReductions) {
        const std::string what = std::string(dtypeName(t)) + " reduction " + std::to_string(int(r));
        Tensor loss = kernels::nllLossForward(lp, tg, r, -100);
        EXPECT_TRUE(gpuMatches(kernels::nllLossForward(gpu(lp), gpu(tg), r, -100), loss, lossTol(t), what));
        Tensor gloss = r == LossReduction::none ? hostRandom({9}, t, 5) : Tensor::scalar(1.5, t);
        EXPECT_TRUE(gpuMatches(kernels::nllLossBackward(gpu(gloss), gpu(tg), 7, r, -100),
                               kernels::nllLossBackward(gloss, tg, 7, r, -100), what + " backward"));
      }
    }
  }
}

TEST(GpuMseLoss, forward_and_backward_match_cpu) {
  LOCKSTEP_REQUIRE_GPU();
  for (DType t : kFloatDTypes) {
    std::vector<std::pair<Tensor, Tensor>> cases = {
        {hostRandom({5, 7}, t, 1), hostRandom({5, 7}, t, 2)},
        {hostRandom({300001}, t, 3), hostRandom({300001}, t, 4)},
        {hostRandom({7, 5}, t, 5).transpose(0, 1), hostRandom({5, 7}, t, 6)}};
    for (auto& [a, b] : cases) {
      for (LossReduction r : kReductions) {
        const std::string what =
            std::string(dtypeName(t)) + " " + a.describe() + " reduction " + std::to_string(int(r));
        Tensor loss = kernels::mseLossForward(a, b, r);
        Tol tol = lossTol(t);
        if (t == DType::f32 && r == LossReduction::sum) tol.rtol = 1e-4;
        EXPECT_TRUE(gpuMatches(kernels::mseLossForward(gpu(a), gpu(b), r), loss, tol, what));
        Tensor gloss = r == LossReduction::none ? hostRandom(a.shape(), t, 7) : Tensor::scalar(0.5, t);
        EXPECT_TRUE(gpuMatches(kernels::mseLossBackward(gpu(gloss), gpu(a), gpu(b), r),
                               kernels::mseLossBackward(gloss, a, b, r), what + " backward"));
      }
    }
  }
  Tensor a = hostRandom({3}, DType::f32, 1);
  EXPECT_THROW(kernels::mseLossForward(gpu(a), a, LossReduction::mean), ValueError);
}
