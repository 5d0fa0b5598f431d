// The fused gradient accumulations of kernels/accumulate.h on a GPU (autograd's engine uses them
// where a tensor has several readers): each adds what the op's own backward kernel gives into the
// held gradient (the layer norm bit for bit; the GEMM and the convolution to their rounding: cuDNN
// and cuBLASLt add before rounding once), and a held gradient in a layout the kernel does not write
// is refused untouched. Runs with ctest -L gpu; skips without a GPU.
#include <gtest/gtest.h>

#include "gpu_compare.h"
#include "lockstep/kernels/accumulate.h"
#include "lockstep/kernels/conv.h"
#include "lockstep/kernels/layer_norm.h"
#include "lockstep/kernels/linear.h"
#include "lockstep/kernels/transformer.h"

namespace lockstep {
namespace {

using testing::gpu;
using testing::gpuMatches;
using testing::hostRandom;
using testing::kExact;
using testing::OpClass;
using testing::tolFor;

// held + the op's gradient on the GPU, unfused, brought to the host.
Tensor plainSum(const Tensor& held, const Tensor& grad) {
  Tensor sum = held.clone();
  kernels::addInto(sum, grad);
  return sum.to(Device::cpu());
}

TEST(GpuGradInto, convolution_data_gradient_adds_into_the_held_one) {
  LOCKSTEP_REQUIRE_GPU();
  kernels::Conv2dParams p;
  p.padding = {1, 1};
  p.stride = {2, 2};
  for (DType t : {DType::f32, DType::bf16}) {
    for (bool cl : {false, true}) {
      SCOPED_TRACE(std::string(dtypeName(t)) + (cl ? " channels_last" : ""));
      const MemoryFormat f = cl ? MemoryFormat::channels_last : MemoryFormat::contiguous;
      Tensor x = gpu(hostRandom({4, 8, 9, 9}, t, 1)).toFormat(f), w = gpu(hostRandom({16, 8, 3, 3}, t, 2));
      Tensor gy = gpu(hostRandom({4, 16, 5, 5}, t, 3)).toFormat(f);
      Tensor held = gpu(hostRandom({4, 8, 9, 9}, t, 4)).toFormat(f);
      const Tensor want = plainSum(held, kernels::conv2dBackwardData(gy, x, w, p));
      ASSERT_TRUE(kernels::conv2dBackwardDataInto(held, gy, x, w, p));
      EXPECT_TRUE(gpuMatches(held, want, tolFor(t, OpClass::gemm)));
      // A held gradient in the other layout is the caller's to add.
      Tensor other = gpu(hostRandom({4, 8, 9, 9}, t, 5))
                         .toFormat(cl ? MemoryFormat::contiguous : MemoryFormat::channels_last);
      const Tensor before = other.to(Device::cpu());
      EXPECT_FALSE(kernels::conv2dBackwardDataInto(other, gy, x, w, p));
      EXPECT_TRUE(gpuMatches(other, before, kExact));
    }
  }
}

TEST(GpuGradInto, linear_data_gradient_adds_into_the_held_one) {
  LOCKSTEP_REQUIRE_GPU();
  // Small problems take cuBLASLt as they are; 4,096 x 512 x 1,001 (over 8 MiB, rows of D not whole
  // 16-byte runs) the padded copies, the held rows copied in and out.
  struct Size {
    int64_t rows, out, in;
  };
  for (const Size& z : {Size{35, 24, 40}, Size{35, 24, 37}, Size{4096, 512, 1001}}) {
    for (DType t : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(std::string(dtypeName(t)) + " " + std::to_string(z.rows) + " x " + std::to_string(z.out) +
                   " x " + std::to_string(z.in));
      Tensor gy = gpu(hostRandom({z.rows, z.out}, t, 1)), w = gpu(hostRandom({z.out, z.in}, t, 2));
      Tensor held = gpu(hostRandom({z.rows, z.in}, t, 3));
      const Tensor want = plainSum(held, kernels::linearBackwardData(gy, w));
      ASSERT_TRUE(kernels::linearBackwardDataInto(held, gy, w));
      EXPECT_TRUE(gpuMatches(held, want, tolFor(t, OpClass::gemm)));
    }
  }
  Tensor gy = gpu(hostRandom({6, 24}, DType::f32, 1)), w = gpu(hostRandom({24, 40}, DType::f32, 2));
  Tensor strided = gpu(hostRandom({40, 6}, DType::f32, 3)).transpose(0, 1);
  const Tensor before = strided.to(Device::cpu());
  EXPECT_FALSE(kernels::linearBackwardDataInto(strided, gy, w));
  EXPECT_TRUE(gpuMatches(strided, before, kExact));
}

TEST(GpuGradInto, layer_norm_input_gradient_adds_into_the_held_one) {
  LOCKSTEP_REQUIRE_GPU();
  // f32 rows read with an f32 and with a bf16 gradient (autocast's lowered norm); 50 and 1,500
  // columns take the warp and the block kernels.
  // Without a weight and bias too (the store's add must not fuse with the last product).
  for (int64_t n : {50, 1500}) {
    for (DType gt : {DType::f32, DType::bf16}) {
      for (bool affine : {true, false}) {
        SCOPED_TRACE(std::string(dtypeName(gt)) + " n " + std::to_string(n) + (affine ? "" : " no weight"));
        Tensor x = gpu(hostRandom({6, n}, DType::f32, 1)),
               w = affine ? gpu(hostRandom({n}, DType::f32, 2)) : Tensor(),
               b = affine ? gpu(hostRandom({n}, DType::f32, 3)) : Tensor(),
               gy = gpu(hostRandom({6, n}, gt, 4));
        auto fwd = kernels::layerNormForward(x, {n}, w, b, 1e-5);
        auto plain = kernels::layerNormBackward(gy, x, fwd.mean, fwd.variance, {n}, w, b, 1e-5);
        Tensor held = gpu(hostRandom({6, n}, DType::f32, 5));
        const Tensor want = plainSum(held, plain.gx);
        auto r = kernels::layerNormBackwardInto(held, gy, x, fwd.mean, fwd.variance, {n}, w, b, 1e-5);
        ASSERT_TRUE(r.has_value());
        EXPECT_FALSE(r->gx.defined());
        EXPECT_TRUE(gpuMatches(held, want, kExact));
        if (affine) {
          EXPECT_TRUE(gpuMatches(r->gweight, plain.gweight.to(Device::cpu()), kExact));
          EXPECT_TRUE(gpuMatches(r->gbias, plain.gbias.to(Device::cpu()), kExact));
        }
      }
    }
  }
}

TEST(GpuGradInto, rms_norm_input_gradient_adds_into_the_held_one) {
  LOCKSTEP_REQUIRE_GPU();
  for (int64_t d : {48, 1500}) {
    for (DType gt : {DType::f32, DType::bf16}) {
      for (bool weighted : {true, false}) {
        SCOPED_TRACE(std::string(dtypeName(gt)) + " d " + std::to_string(d) + (weighted ? "" : " no weight"));
        Tensor x = gpu(hostRandom({5, d}, DType::f32, 1)),
               w = weighted ? gpu(hostRandom({d}, DType::f32, 2)) : Tensor(),
               gy = gpu(hostRandom({5, d}, gt, 3));
        auto fwd = kernels::rmsNormForward(x, w, 1e-6);
        auto plain = kernels::rmsNormBackward(gy, x, fwd.rstd, w);
        Tensor held = gpu(hostRandom({5, d}, DType::f32, 4));
        const Tensor want = plainSum(held, plain.gx);
        auto r = kernels::rmsNormBackwardInto(held, gy, x, fwd.rstd, w);
        ASSERT_TRUE(r.has_value());
        EXPECT_FALSE(r->gx.defined());
        EXPECT_TRUE(gpuMatches(held, want, kExact));
        if (weighted) {
          EXPECT_TRUE(gpuMatches(r->gweight, plain.gweight.to(Device::cpu()), kExact));
        }
      }
    }
  }
}

}  // namespace
}  // namespace lockstep
