// CUDA dropout beyond gpu_ops_test.cpp's table (the host's mask, values and generator advance in
// every dtype): the share kept over a large tensor, and bad input. Skips without a GPU.
#include <gtest/gtest.h>

#include "gpu_compare.h"
#include "lockstep/kernels.h"

using namespace lockstep;
using lockstep::testing::gpu;
using lockstep::testing::hostRandom;

TEST(GpuDropout, keeps_about_one_minus_p_and_rejects_bad_input) {
  LOCKSTEP_REQUIRE_GPU();
  Generator gen(7);
  auto [y, mask] = kernels::dropoutForward(Tensor::ones({1 << 20}, DType::f32, Device::cuda(0)), 0.3, gen);
  const double kept = kernels::reduce(kernels::ReduceOp::mean, mask.to(DType::f64), {0}).item<double>();
  EXPECT_NEAR(kept, 0.7, 0.005);
  EXPECT_NEAR(kernels::reduce(kernels::ReduceOp::mean, y, {0}).item<double>(), 1.0, 0.01);
  Tensor x = gpu(hostRandom({4}, DType::f32, 1));
  EXPECT_THROW(kernels::dropoutForward(x, 1.5, gen), ValueError);
  EXPECT_THROW(kernels::dropoutBackward(x, Tensor::ones({4}, DType::u8), 0.5), ValueError);
}
