// CUDA concat of integers against the CPU, and operands on two devices are an error (the floating
// dtypes, dims and layouts: gpu_ops_test.cpp). Skips without a GPU.
#include <gtest/gtest.h>

#include "gpu_compare.h"
#include "lockstep/kernels.h"

using namespace lockstep;
using lockstep::testing::gpu;

TEST(GpuConcat, integers_match_cpu_and_mixed_devices_are_refused) {
  LOCKSTEP_REQUIRE_GPU();
  Tensor a = Tensor::arange(6, DType::i64).view({2, 3});
  EXPECT_EQ(
      kernels::concat({gpu(a), gpu(a.transpose(0, 1).contiguous().view({2, 3}))}, 0).toVector<int64_t>(),
      kernels::concat({a, a.transpose(0, 1).contiguous().view({2, 3})}, 0).toVector<int64_t>());
  EXPECT_THROW(kernels::concat({gpu(a), a}, 0), ValueError);
  EXPECT_THROW(kernels::concat({a, gpu(a)}, 1), ValueError);
}
