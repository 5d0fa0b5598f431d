// batch_norm2d on a GPU (kernels/cuda/batch_norm.cu) beyond gpu_ops_test.cpp's table (training and
// evaluation, with and without the affine parameters, both layouts, the gradients): f32 running
// statistics under bf16 activations, evaluation leaving the running statistics bitwise as they
// were, and the errors. Runs with ctest -L gpu; skips without a GPU.
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
using testing::tolFor;

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

// Activations large enough that the sums split over many blocks (NHWC: 32 splits of [16384 x 64];
// NCHW: 2 splits per channel of [32, 8, 32, 32]), against the f64 oracle, and the same bits on a
// second call (the splits are reduced in a fixed order).
TEST(GpuBatchNorm2d, large_activations_match_the_oracle_and_repeat_bitwise) {
  LOCKSTEP_REQUIRE_GPU();
  for (DType t : {DType::f32, DType::bf16}) {
    for (const Shape& shape : {Shape{64, 64, 16, 16}, Shape{32, 8, 32, 32}}) {
      for (bool cl : {false, true}) {
        const int64_t C = shape[1];
        Tensor x = roundedInput(shape, t, 20, -2.0, 3.0), gy = roundedInput(shape, t, 21);
        Tensor w = roundedInput({C}, DType::f32, 22), b = roundedInput({C}, DType::f32, 23);
        BatchNormParams p;
        const std::string what =
            std::string(dtypeName(t)) + " " + shapeToString(shape) + (cl ? " NHWC" : " NCHW");
        auto want = kernels::batchNorm2dForward(asF64(x), asF64(w), asF64(b), Tensor(), Tensor(), p);
        auto gwant =
            kernels::batchNorm2dBackward(asF64(gy), asF64(x), asF64(w), true, want.mean, want.var, p);
        Tensor gx;
        for (int rep = 0; rep < 2; ++rep) {
          auto got = kernels::batchNorm2dForward(onGpu(x, cl), gpu(w), gpu(b), Tensor(), Tensor(), p);
          auto g =
              kernels::batchNorm2dBackward(onGpu(gy, cl), onGpu(x, cl), gpu(w), true, got.mean, got.var, p);
          EXPECT_EQ(got.y.isChannelsLast(), cl) << what;
          testing::expectGpuClose(got.y, want.y, t, tolFor(t, OpClass::batch_norm), "y " + what);
          testing::expectGpuClose(got.mean, want.mean, DType::f32, {1e-5, 1e-5}, "mean " + what);
          testing::expectGpuClose(g.x, gwant.x, t, tolFor(t, OpClass::batch_norm), "dx " + what);
          // Sums over 16384 or 32768 values: the f64 oracle's, rounded once to f32.
          testing::expectGpuClose(g.weight, gwant.weight, DType::f32, {1e-3, 1e-4}, "dweight " + what);
          testing::expectGpuClose(g.bias, gwant.bias, DType::f32, {1e-3, 1e-4}, "dbias " + what);
          if (rep == 0) {
            gx = g.x.to(Device::cpu());
          } else {
            EXPECT_EQ(g.x.to(Device::cpu()).to(DType::f64).toVector<double>(),
                      gx.to(DType::f64).toVector<double>())
                << what;
          }
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
