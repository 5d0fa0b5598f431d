// Pooling on a GPU (kernels/cuda/pool.cu) against the CPU reference in f64 on the same (rounded)
// inputs: max (with and without the training workspace), average (count_include_pad both ways,
// ceil_mode) and adaptive average, forward and backward, NCHW and channels_last, strided inputs and
// the errors. Runs with ctest -L gpu; skips without a GPU.
#include <gtest/gtest.h>

#include <limits>

#include "gpu_compare.h"
#include "lockstep/kernels/pool.h"

namespace lockstep {
namespace {

using kernels::Pool2dParams;
using testing::asF64;
using testing::gpu;
using testing::onGpu;
using testing::OpClass;
using testing::roundedInput;
using testing::Tol;
using testing::tolFor;

// Pooling rounds once (a max is exact; a mean of a few values computed in f32).

std::vector<Pool2dParams> params() {
  Pool2dParams two;  // kernel 2, stride 2
  Pool2dParams overlap;
  overlap.kernel = {3, 3};
  overlap.stride = {2, 2};
  overlap.padding = {1, 1};
  Pool2dParams ceil;
  ceil.kernel = {3, 2};
  ceil.stride = {2, 3};
  ceil.padding = {1, 1};
  ceil.ceil_mode = true;
  Pool2dParams exclude = ceil;
  exclude.count_include_pad = false;
  return {two, overlap, ceil, exclude};
}

std::string name(const Pool2dParams& p, bool cl) {
  return "kernel " + std::to_string(p.kernel[0]) + "x" + std::to_string(p.kernel[1]) + " stride " +
         std::to_string(p.stride[0]) + " pad " + std::to_string(p.padding[0]) + (p.ceil_mode ? " ceil" : "") +
         (p.count_include_pad ? "" : " exclude_pad") + (cl ? " channels_last" : "");
}

TEST(GpuPool2d, max_pool_forward_and_backward_match_the_cpu) {
  LOCKSTEP_REQUIRE_GPU();
  for (DType t : testing::kFloatDTypes) {
    for (const Pool2dParams& p : params()) {
      for (bool cl : {false, true}) {
        Tensor x = roundedInput({2, 3, 9, 11}, t, 1);
        auto want = kernels::maxPool2dForward(asF64(x), p, true);
        auto got = kernels::maxPool2dForward(onGpu(x, cl), p, true);
        testing::expectGpuClose(got.y, want.y, t, tolFor(t, OpClass::pool), "max_pool2d " + name(p, cl));
        if (cl) {
          EXPECT_TRUE(got.y.isChannelsLast()) << name(p, cl);
        }
        Tensor gy = roundedInput(want.y.shape(), t, 2);
        Tensor want_gx = kernels::maxPool2dBackward(asF64(gy), asF64(x), want.workspace, p);
        testing::expectGpuClose(kernels::maxPool2dBackward(gpu(gy), onGpu(x, cl), got.workspace, p), want_gx,
                                t, tolFor(t, OpClass::pool), "max_pool2d backward " + name(p, cl));
        // Without a workspace (eval mode) the maxima are found again from x.
        testing::expectGpuClose(kernels::maxPool2dBackward(onGpu(gy, cl), onGpu(x, cl), Tensor(), p), want_gx,
                                t, tolFor(t, OpClass::pool),
                                "max_pool2d backward without workspace " + name(p, cl));
        EXPECT_FALSE(kernels::maxPool2dForward(onGpu(x, cl), p, false).workspace.defined());
      }
    }
  }
}

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

TEST(GpuPool2d, avg_pool_forward_and_backward_match_the_cpu) {
  LOCKSTEP_REQUIRE_GPU();
  for (DType t : testing::kFloatDTypes) {
    for (const Pool2dParams& p : params()) {
      for (bool cl : {false, true}) {
        Tensor x = roundedInput({2, 3, 9, 11}, t, 3);
        Tensor want = kernels::avgPool2dForward(asF64(x), p);
        testing::expectGpuClose(kernels::avgPool2dForward(onGpu(x, cl), p), want, t, tolFor(t, OpClass::pool),
                                "avg_pool2d " + name(p, cl));
        Tensor gy = roundedInput(want.shape(), t, 4);
        Tensor gx = kernels::avgPool2dBackward(gpu(gy), onGpu(x, cl), p);
        testing::expectGpuClose(gx, kernels::avgPool2dBackward(asF64(gy), asF64(x), p), t,
                                tolFor(t, OpClass::pool), "avg_pool2d backward " + name(p, cl));
        if (cl) {
          EXPECT_TRUE(gx.isChannelsLast()) << name(p, cl);
        }
      }
    }
  }
}

TEST(GpuPool2d, adaptive_avg_pool_matches_the_cpu) {
  LOCKSTEP_REQUIRE_GPU();
  const std::array<int64_t, 2> outs[] = {{1, 1}, {3, 4}, {5, 7}, {9, 11}, {12, 13}};
  for (DType t : testing::kFloatDTypes) {
    for (auto o : outs) {
      for (bool cl : {false, true}) {
        Tensor x = roundedInput({2, 5, 9, 11}, t, 5);
        const std::string what =
            "adaptive_avg_pool2d to " + std::to_string(o[0]) + "x" + std::to_string(o[1]);
        Tensor want = kernels::adaptiveAvgPool2dForward(asF64(x), o);
        testing::expectGpuClose(kernels::adaptiveAvgPool2dForward(onGpu(x, cl), o), want, t,
                                tolFor(t, OpClass::pool), what);
        Tensor gy = roundedInput(want.shape(), t, 6);
        testing::expectGpuClose(kernels::adaptiveAvgPool2dBackward(onGpu(gy, cl), onGpu(x, cl), o),
                                kernels::adaptiveAvgPool2dBackward(asF64(gy), asF64(x), o), t,
                                tolFor(t, OpClass::pool), what + " backward");
      }
    }
  }
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
