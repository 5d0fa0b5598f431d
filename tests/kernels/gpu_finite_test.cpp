// The CUDA found-inf check of loss scaling: the bool forms against the CPU, and the device-flag
// form (nothing read back) over many tensors, every floating dtype, strided views. Skips without a
// GPU.
#include <gtest/gtest.h>

#include <limits>

#include "gpu_compare.h"
#include "lockstep/kernels.h"

using namespace lockstep;
using lockstep::testing::gpu;
using lockstep::testing::gpuMatches;
using lockstep::testing::hostRandom;
using lockstep::testing::kFloatDTypes;

TEST(GpuFinite, bool_checks_match_cpu) {
  LOCKSTEP_REQUIRE_GPU();
  for (DType t : {DType::f32, DType::f64}) {
    for (double bad :
         {0.0, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
      Tensor x = hostRandom({1000, 37}, t, 1);
      if (bad != 0.0) x.narrow(0, 777, 1).narrow(1, 5, 1).fill(bad);
      Tensor d = gpu(x);
      EXPECT_EQ(kernels::hasNonFinite(d), kernels::hasNonFinite(x));
      EXPECT_EQ(kernels::hasNonFinite(d.transpose(0, 1)), kernels::hasNonFinite(x));
      EXPECT_EQ(kernels::scaleAndCheckNonFinite(d, 0.25), kernels::scaleAndCheckNonFinite(x, 0.25));
      if (bad == 0.0) {
        EXPECT_TRUE(gpuMatches(d, x, lockstep::testing::kExact));  // a power of two scales exactly
      }
    }
    // A finite value the factor carries past the dtype's range counts.
    Tensor big = Tensor::full({3}, t == DType::f32 ? 3e38 : 1e308, t, Device::cuda(0));
    EXPECT_TRUE(kernels::scaleAndCheckNonFinite(big, 4.0));
  }
  EXPECT_FALSE(
      kernels::hasNonFinite(Tensor::empty({0}, DType::f32, MemoryFormat::contiguous, Device::cuda(0))));
}

TEST(GpuFinite, device_flag_collects_many_tensors_in_every_dtype) {
  LOCKSTEP_REQUIRE_GPU();
  for (DType t : kFloatDTypes) {
    Tensor found = Tensor::zeros({1}, DType::f32, Device::cuda(0));
    std::vector<Tensor> grads;
    for (int i = 0; i < 5; ++i) grads.push_back(gpu(hostRandom({17 * i + 3, 5}, t, i)));
    for (Tensor& g : grads) kernels::scaleAndCheckNonFiniteInto(g, 0.5, found);
    EXPECT_EQ(found.item<float>(), 0.0f) << dtypeName(t);
    grads[2].narrow(0, 4, 1).narrow(1, 1, 1).fill(std::numeric_limits<double>::infinity());
    // A column slice (not dense: the strided path) holding the inf sets its own flag.
    Tensor slice_flag = Tensor::zeros({1}, DType::f32, Device::cuda(0));
    Tensor slice = grads[2].narrow(1, 0, 3);
    kernels::scaleAndCheckNonFiniteInto(slice, 1.0, slice_flag);
    EXPECT_EQ(slice_flag.item<float>(), 1.0f) << dtypeName(t);
    for (Tensor& g : grads) kernels::scaleAndCheckNonFiniteInto(g, 1.0, found);
    kernels::scaleAndCheckNonFiniteInto(grads[0], 1.0, found);  // a later clean tensor does not reset it
    EXPECT_EQ(found.item<float>(), 1.0f) << dtypeName(t);
    // The scaling itself, against the host.
    Tensor h = hostRandom({33}, t, 9), d = gpu(h);
    Tensor f2 = Tensor::zeros({1}, DType::f32, Device::cuda(0));
    kernels::scaleAndCheckNonFiniteInto(d, 0.5, f2);
    EXPECT_TRUE(
        gpuMatches(d, kernels::binaryScalar(kernels::BinaryOp::mul, h, 0.5), lockstep::testing::kExact));
  }
  Tensor g = gpu(hostRandom({3}, DType::f32, 1));
  Tensor host_flag = Tensor::zeros({1});
  EXPECT_THROW(kernels::scaleAndCheckNonFiniteInto(g, 1.0, host_flag), ValueError);
  Tensor wrong = Tensor::zeros({2}, DType::f32, Device::cuda(0));
  EXPECT_THROW(kernels::scaleAndCheckNonFiniteInto(g, 1.0, wrong), ValueError);
}
