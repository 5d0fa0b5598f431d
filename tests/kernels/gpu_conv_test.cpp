// conv2d on a GPU (cuDNN, kernels/cuda/conv.cpp) beyond gpu_ops_test.cpp's table (every dtype,
// NCHW and channels-last, stride/padding/dilation/groups, both gradients): the fused relu, a sliced
// input, an empty batch and the errors. Runs with ctest -L gpu; skips without a GPU.
#include <gtest/gtest.h>

#include "gpu_compare.h"
#include "lockstep/kernels/conv.h"

namespace lockstep {
namespace {

using kernels::Conv2dParams;
using testing::asF64;
using testing::gpu;
using testing::onGpu;
using testing::OpClass;
using testing::roundedInput;
using testing::tolFor;

// f32 may run on TF32 tensor cores (PyTorch's cudnn default): ~1e-3 relative.

struct Case {
  Shape x, w;
  Conv2dParams p;
  bool bias;
};

std::vector<Case> cases() {
  Conv2dParams same;
  same.padding = {1, 1};
  Conv2dParams mixed;
  mixed.stride = {2, 1};
  mixed.padding = {1, 0};
  mixed.dilation = {1, 2};
  mixed.groups = 2;
  Conv2dParams depthwise;
  depthwise.groups = 6;
  depthwise.padding = {1, 1};
  return {{{2, 3, 9, 9}, {8, 3, 3, 3}, same, true},
          {{3, 4, 10, 7}, {6, 2, 3, 2}, mixed, true},
          {{2, 6, 8, 8}, {6, 1, 3, 3}, depthwise, false},
          {{1, 1, 5, 5}, {2, 1, 5, 5}, Conv2dParams{}, true}};
}

std::string name(const Case& c, bool cl) {
  return shapeToString(c.x) + " * " + shapeToString(c.w) + (cl ? " channels_last" : "");
}

TEST(GpuConv2d, fused_relu_clamps_the_biased_output) {
  LOCKSTEP_REQUIRE_GPU();
  Case c = cases()[0];
  c.p.fuse_relu = true;
  Tensor x = roundedInput(c.x, DType::f32, 4), w = roundedInput(c.w, DType::f32, 5),
         b = roundedInput({8}, DType::f32, 6);
  Tensor want = kernels::conv2dForward(asF64(x), asF64(w), asF64(b), c.p);
  for (bool cl : {false, true}) {
    Tensor got = kernels::conv2dForward(onGpu(x, cl), gpu(w), gpu(b), c.p);
    testing::expectGpuClose(got, want, DType::f32, tolFor(DType::f32, OpClass::conv),
                            "conv2d+relu " + name(c, cl));
    for (float v : got.toVector<float>()) ASSERT_GE(v, 0.0f);
  }
}

TEST(GpuConv2d, strided_input_and_empty_batch) {
  LOCKSTEP_REQUIRE_GPU();
  const Case c = cases()[1];
  // x as a slice of a wider tensor: neither contiguous nor channels_last.
  Tensor wide = roundedInput({3, 4, 10, 12}, DType::f32, 10);
  Tensor w = roundedInput(c.w, DType::f32, 11);
  Tensor want = kernels::conv2dForward(asF64(wide).narrow(3, 2, 7), asF64(w), Tensor(), c.p);
  testing::expectGpuClose(kernels::conv2dForward(gpu(wide).narrow(3, 2, 7), gpu(w), Tensor(), c.p), want,
                          DType::f32, tolFor(DType::f32, OpClass::conv), "sliced x");
  Tensor empty = Tensor::zeros({0, 4, 10, 7}, DType::f32, Device::cuda(0));
  Tensor y = kernels::conv2dForward(empty, gpu(w), Tensor(), c.p);
  EXPECT_EQ(y.size(0), 0);
  Tensor gy = Tensor::zeros(y.shape(), DType::f32, Device::cuda(0));
  auto g = kernels::conv2dBackwardWeights(gy, empty, c.w, true, c.p);
  EXPECT_EQ(g.weight.toVector<float>(), std::vector<float>(static_cast<size_t>(shapeNumel(c.w)), 0.0f));
  EXPECT_EQ(g.bias.toVector<float>(), std::vector<float>(6, 0.0f));
}

TEST(GpuConv2d, mixed_devices_are_refused_naming_both) {
  LOCKSTEP_REQUIRE_GPU();
  const Case c = cases()[0];
  Tensor x = roundedInput(c.x, DType::f32, 12), w = roundedInput(c.w, DType::f32, 13);
  try {
    kernels::conv2dForward(gpu(x), w, Tensor(), c.p);
    FAIL() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("different devices"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lockstep
