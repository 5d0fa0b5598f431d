// CUDA dropout draws the host's Philox mask: the same mask, values and generator advance as the
// CPU kernel in every floating dtype; backward scales by the mask. Skips without a GPU.
#include <gtest/gtest.h>

#include "gpu_compare.h"
#include "lockstep/kernels.h"

using namespace lockstep;
using lockstep::testing::gpu;
using lockstep::testing::gpuMatches;
using lockstep::testing::hostRandom;
using lockstep::testing::kFloatDTypes;

TEST(GpuDropout, same_mask_values_and_generator_advance_as_cpu) {
  LOCKSTEP_REQUIRE_GPU();
  for (DType t : kFloatDTypes) {
    for (double p : {0.0, 0.1, 0.5, 0.9, 1.0}) {
      Tensor x = hostRandom({37, 129}, t, 3).transpose(0, 1);  // non-contiguous: row-major draws
      Generator host_gen(1234), dev_gen(1234);
      host_gen.setState(1234, 77);
      dev_gen.setState(1234, 77);
      auto [y, mask] = kernels::dropoutForward(x, p, host_gen);
      auto [y_dev, mask_dev] = kernels::dropoutForward(gpu(x), p, dev_gen);
      const std::string what = std::string(dtypeName(t)) + " p " + std::to_string(p);
      EXPECT_EQ(mask_dev.toVector<int64_t>(), mask.toVector<int64_t>()) << what;
      EXPECT_TRUE(gpuMatches(y_dev, y, lockstep::testing::kExact, what));
      EXPECT_EQ(dev_gen.offset(), host_gen.offset()) << what;
      Tensor gy = hostRandom(x.shape(), t, 5);
      EXPECT_TRUE(gpuMatches(kernels::dropoutBackward(gpu(gy), mask_dev, p),
                             kernels::dropoutBackward(gy, mask, p), lockstep::testing::kExact,
                             what + " backward"));
    }
  }
}

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
