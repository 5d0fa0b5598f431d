// batch_norm2d on a GPU (kernels/cuda/batch_norm.cu) against the CPU entry points in f64 on the same
// (rounded) inputs: training (batch statistics, running statistics updated in place with momentum
// and the unbiased variance) and eval, with and without the affine parameters, both layouts, the
// gradients, and the errors. Runs with ctest -L gpu; skips without a GPU.
#include <gtest/gtest.h>

#include "gpu_compare.h"
#include "lockstep/kernels/batch_norm.h"

namespace lockstep {
namespace {

using kernels::BatchNormParams;
using testing::asF64;
using testing::gpu;
using testing::onGpu;
using testing::OpClass;
using testing::roundedInput;
using testing::Tol;
using testing::tolFor;

TEST(GpuBatchNorm2d, training_forward_and_running_statistics_match_the_cpu) {
  LOCKSTEP_REQUIRE_GPU();
  for (DType t : testing::kFloatDTypes) {
    for (bool cl : {false, true}) {
      for (bool affine : {true, false}) {
        const std::string what =
            std::string(dtypeName(t)) + (cl ? " channels_last" : "") + (affine ? "" : " no affine");
        // x with an offset and scale per channel, so the statistics are not trivially 0 and 1/3.
        Tensor x = roundedInput({4, 3, 5, 7}, t, 1, -2.0, 3.0);
        Tensor w = affine ? roundedInput({3}, t, 2) : Tensor(),
               b = affine ? roundedInput({3}, t, 3) : Tensor();
        Tensor rm = roundedInput({3}, t, 4), rv = roundedInput({3}, t, 5, 0.5, 2.0);
        BatchNormParams p;
        p.momentum = 0.3;
        // The GPU's copies first: for f64, asF64 returns rm itself, which the CPU call updates.
        Tensor gpu_rm = gpu(rm), gpu_rv = gpu(rv);
        Tensor cpu_rm = asF64(rm), cpu_rv = asF64(rv);
        auto want = kernels::batchNorm2dForward(asF64(x), asF64(w), asF64(b), cpu_rm, cpu_rv, p);
        auto got = kernels::batchNorm2dForward(onGpu(x, cl), affine ? gpu(w) : w, affine ? gpu(b) : b, gpu_rm,
                                               gpu_rv, p);
        testing::expectGpuClose(got.y, want.y, t, tolFor(t, OpClass::batch_norm), "y " + what);
        if (cl) {
          EXPECT_TRUE(got.y.isChannelsLast()) << what;
        }
        const Tol stat{1e-6, 1e-6};  // statistics are f32 (f64) sums of the same rounded inputs
        const DType st = t == DType::f64 ? DType::f64 : DType::f32;
        testing::expectGpuClose(got.mean, want.mean, st, stat, "mean " + what);
        testing::expectGpuClose(got.var, want.var, st, stat, "var " + what);
        // The running statistics, updated in place in their own dtype (rounded once).
        testing::expectGpuClose(gpu_rm, cpu_rm, t, tolFor(t, OpClass::batch_norm), "running_mean " + what);
        testing::expectGpuClose(gpu_rv, cpu_rv, t, tolFor(t, OpClass::batch_norm), "running_var " + what);
      }
    }
  }
}

TEST(GpuBatchNorm2d, f32_running_statistics_with_bf16_activations) {
  LOCKSTEP_REQUIRE_GPU();
  Tensor x = roundedInput({8, 4, 3, 3}, DType::bf16, 6), w = roundedInput({4}, DType::bf16, 7);
  Tensor rm = Tensor::zeros({4}), rv = Tensor::ones({4});
  Tensor cpu_rm = rm.to(DType::f64), cpu_rv = rv.to(DType::f64);
  BatchNormParams p;
  kernels::batchNorm2dForward(asF64(x), asF64(w), Tensor(), cpu_rm, cpu_rv, p);
  Tensor gpu_rm = gpu(rm), gpu_rv = gpu(rv);
  kernels::batchNorm2dForward(gpu(x), gpu(w), Tensor(), gpu_rm, gpu_rv, p);
  testing::expectGpuClose(gpu_rm, cpu_rm, DType::f32, {1e-6, 1e-6}, "running_mean");
  testing::expectGpuClose(gpu_rv, cpu_rv, DType::f32, {1e-6, 1e-6}, "running_var");
}

TEST(GpuBatchNorm2d, eval_uses_the_running_statistics_and_leaves_them) {
  LOCKSTEP_REQUIRE_GPU();
  for (DType t : testing::kFloatDTypes) {
    for (bool cl : {false, true}) {
      Tensor x = roundedInput({2, 5, 4, 3}, t, 8), w = roundedInput({5}, t, 9), b = roundedInput({5}, t, 10);
      Tensor rm = roundedInput({5}, t, 11), rv = roundedInput({5}, t, 12, 0.5, 2.0);
      BatchNormParams p;
      p.training = false;
      auto want = kernels::batchNorm2dForward(asF64(x), asF64(w), asF64(b), asF64(rm), asF64(rv), p);
      Tensor gpu_rm = gpu(rm), gpu_rv = gpu(rv);
      auto got = kernels::batchNorm2dForward(onGpu(x, cl), gpu(w), gpu(b), gpu_rm, gpu_rv, p);
      testing::expectGpuClose(got.y, want.y, t, tolFor(t, OpClass::batch_norm),
                              std::string("eval y ") + dtypeName(t));
      EXPECT_EQ(gpu_rm.toVector<double>(), rm.toVector<double>());
      EXPECT_EQ(gpu_rv.toVector<double>(), rv.toVector<double>());
      EXPECT_FALSE(got.mean.sharesStorage(gpu_rm));
    }
  }
}

TEST(GpuBatchNorm2d, backward_matches_the_cpu_in_training_and_eval) {
  LOCKSTEP_REQUIRE_GPU();
  for (DType t : testing::kFloatDTypes) {
    for (bool training : {true, false}) {
      for (bool cl : {false, true}) {
        const std::string what =
            std::string(dtypeName(t)) + (training ? " training" : " eval") + (cl ? " channels_last" : "");
        Tensor x = roundedInput({4, 3, 5, 6}, t, 13, -1.0, 2.0), w = roundedInput({3}, t, 14);
        Tensor gy = roundedInput({4, 3, 5, 6}, t, 15);
        Tensor rm = roundedInput({3}, DType::f32, 16), rv = roundedInput({3}, DType::f32, 17, 0.5, 2.0);
        BatchNormParams p;
        p.training = training;
        auto fwd_cpu = kernels::batchNorm2dForward(asF64(x), asF64(w), Tensor(), asF64(rm), asF64(rv), p);
        auto fwd_gpu = kernels::batchNorm2dForward(onGpu(x, cl), gpu(w), Tensor(), gpu(rm), gpu(rv), p);
        auto want =
            kernels::batchNorm2dBackward(asF64(gy), asF64(x), asF64(w), true, fwd_cpu.mean, fwd_cpu.var, p);
        auto got = kernels::batchNorm2dBackward(onGpu(gy, !cl), onGpu(x, cl), gpu(w), true, fwd_gpu.mean,
                                                fwd_gpu.var, p);
        Tol tol = tolFor(t, OpClass::batch_norm);
        testing::expectGpuClose(got.x, want.x, t, tol, "grad x " + what);
        tol.atol *= 10;  // sums over 120 values per channel, rounded once
        testing::expectGpuClose(got.weight, want.weight, t, tol, "grad weight " + what);
        testing::expectGpuClose(got.bias, want.bias, t, tol, "grad bias " + what);
        if (cl) {
          EXPECT_TRUE(got.x.isChannelsLast()) << what;
        }
      }
    }
  }
}

TEST(GpuBatchNorm2d, mixed_devices_are_refused_naming_both) {
  LOCKSTEP_REQUIRE_GPU();
  Tensor x = roundedInput({2, 3, 4, 4}, DType::f32, 18);
  BatchNormParams p;
  try {
    kernels::batchNorm2dForward(gpu(x), Tensor::ones({3}), Tensor(), Tensor(), Tensor(), p);
    FAIL() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("different devices"), std::string::npos) << e.what();
  }
  EXPECT_THROW(
      kernels::batchNorm2dForward(gpu(x), Tensor(), Tensor(), Tensor::zeros({3}), gpu(Tensor::ones({3})), p),
      ValueError);
}

}  // namespace
}  // namespace lockstep
