// Pooling on a GPU (kernels/cuda/pool.cu) beyond gpu_ops_test.cpp's table (max, average and
// adaptive average, forward and backward, NCHW and channels-last, every dtype): NaN as PyTorch
// propagates it, strided inputs, bad workspaces. Runs with ctest -L gpu; skips without a GPU.
#include <gtest/gtest.h>

#include <limits>

#include "gpu_compare.h"
#include "lockstep/kernels/pool.h"

namespace lockstep {
namespace {

using kernels::Pool2dParams;
using testing::asF64;
using testing::gpu;
using testing::OpClass;
using testing::roundedInput;
using testing::tolFor;

TEST(GpuPool2d, max_pool_propagates_nan_as_pytorch) {
  LOCKSTEP_REQUIRE_GPU();
  std::vector<float> v(16, 1.0f);
  v[5] = std::numeric_limits<float>::quiet_NaN();
  Tensor x = Tensor::fromVector(v, {1, 1, 4, 4});
  auto r = kernels::maxPool2dForward(gpu(x), Pool2dParams{}, true);
  std::vector<float> y = r.y.toVector<float>();
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], 1.0f);
  EXPECT_EQ(r.workspace.toVector<int64_t>()[0], 5);
}

TEST(GpuPool2d, strided_inputs_and_bad_workspaces) {
  LOCKSTEP_REQUIRE_GPU();
  Tensor wide = roundedInput({2, 3, 8, 14}, DType::f32, 7);
  Pool2dParams p;
  Tensor want = kernels::maxPool2dForward(asF64(wide).narrow(3, 3, 9), p, false).y;
  testing::expectGpuClose(kernels::maxPool2dForward(gpu(wide).narrow(3, 3, 9), p, false).y, want, DType::f32,
                          tolFor(DType::f32, OpClass::pool), "sliced x");
  Tensor x = gpu(roundedInput({2, 3, 8, 8}, DType::f32, 8));
  Tensor gy = Tensor::zeros({2, 3, 4, 4}, DType::f32, Device::cuda(0));
  EXPECT_THROW(kernels::maxPool2dBackward(gy, x, Tensor::zeros({5}, DType::i64, Device::cuda(0)), p),
               ValueError);
  EXPECT_THROW(kernels::avgPool2dBackward(gy.to(Device::cpu()), x, p), ValueError);
}

}  // namespace
}  // namespace lockstep
