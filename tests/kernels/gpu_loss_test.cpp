// The CUDA losses beyond gpu_ops_test.cpp's table (cross-entropy, NLL and MSE in every dtype and
// reduction): an out-of-range target, operands on two devices, wrong target dtypes. Skips without a
// GPU.
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
using lockstep::testing::oracle;
using lockstep::testing::Tol;

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

TEST(GpuMseLoss, rejects_operands_on_different_devices) {
  LOCKSTEP_REQUIRE_GPU();
  Tensor a = hostRandom({3}, DType::f32, 1);
  EXPECT_THROW(kernels::mseLossForward(gpu(a), a, LossReduction::mean), ValueError);
}
