// The element-wise CUDA kernels beyond gpu_ops_test.cpp's table: integer arithmetic, the layout a
// broadcast result takes, accumulation in place, and the errors. Runs with ctest -L gpu; skips
// without a GPU.
#include <gtest/gtest.h>

#include "gpu_compare.h"
#include "lockstep/kernels.h"

using namespace lockstep;
using lockstep::testing::gpu;
using lockstep::testing::gpuMatches;
using lockstep::testing::hostRandom;
using lockstep::testing::kExact;
using lockstep::testing::kFloatDTypes;

TEST(GpuBinary, integers_are_exact) {
  LOCKSTEP_REQUIRE_GPU();
  for (DType t : {DType::i32, DType::i64}) {
    Tensor a = Tensor::arange(15, t).view({3, 5});
    Tensor b = Tensor::arange(5, t);
    for (auto op : {kernels::BinaryOp::add, kernels::BinaryOp::sub, kernels::BinaryOp::mul}) {
      EXPECT_EQ(kernels::binary(op, gpu(a), gpu(b)).toVector<int64_t>(),
                kernels::binary(op, a, b).toVector<int64_t>());
      EXPECT_EQ(kernels::binaryScalar(op, gpu(a), 3).toVector<int64_t>(),
                kernels::binaryScalar(op, a, 3).toVector<int64_t>());
    }
  }
}

TEST(GpuBinary, keeps_channels_last_layout) {
  LOCKSTEP_REQUIRE_GPU();
  Tensor a = hostRandom({2, 3, 4, 5}, DType::f32, 1).toFormat(MemoryFormat::channels_last);
  Tensor b = hostRandom({3, 1, 1}, DType::f32, 2);
  Tensor y = kernels::binary(kernels::BinaryOp::mul, gpu(a), gpu(b));
  EXPECT_TRUE(y.isChannelsLast());
  EXPECT_TRUE(gpuMatches(y, kernels::binary(kernels::BinaryOp::mul, a, b)));
  // b on the left with a's full shape: the result still follows a.
  EXPECT_TRUE(kernels::binary(kernels::BinaryOp::add, gpu(b), gpu(a)).isChannelsLast());
}

TEST(GpuBinary, rejects_operands_on_different_devices_and_dtypes) {
  LOCKSTEP_REQUIRE_GPU();
  Tensor a = hostRandom({3}, DType::f32, 1);
  EXPECT_THROW(kernels::binary(kernels::BinaryOp::add, gpu(a), a), ValueError);
  EXPECT_THROW(kernels::binary(kernels::BinaryOp::add, a, gpu(a)), ValueError);
  EXPECT_THROW(kernels::binary(kernels::BinaryOp::add, gpu(a), gpu(Tensor::arange(3, DType::i64))),
               ValueError);
  EXPECT_THROW(kernels::binary(kernels::BinaryOp::add, gpu(a), gpu(hostRandom({4}, DType::f32, 2))),
               ValueError);
  try {
    kernels::binary(kernels::BinaryOp::mul, gpu(a), a);
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cpu"), std::string::npos) << e.what();
  }
}

// An f32 operand with a bf16/f16 one (autocast's residual add) in one pass, either order and
// channels_last included; other mixes widen first. The CPU's results, which equal widening first.
TEST(GpuBinary, mixed_floating_dtypes_promote_as_on_the_cpu) {
  LOCKSTEP_REQUIRE_GPU();
  struct Case {
    DType a, b;
    Shape sa, sb;
  };
  const std::vector<Case> cases = {
      {DType::f32, DType::bf16, {3, 1001}, {3, 1001}}, {DType::bf16, DType::f32, {3, 1001}, {3, 1001}},
      {DType::f32, DType::f16, {4099}, {4099}},        {DType::f32, DType::bf16, {4, 6}, {6}},
      {DType::f32, DType::f64, {4, 6}, {4, 6}},        {DType::bf16, DType::f16, {4, 6}, {4, 6}},
  };
  for (auto op : {kernels::BinaryOp::add, kernels::BinaryOp::sub, kernels::BinaryOp::mul}) {
    for (const Case& c : cases) {
      Tensor a = hostRandom(c.sa, c.a, 3), b = hostRandom(c.sb, c.b, 4);
      Tensor y = kernels::binary(op, gpu(a), gpu(b));
      EXPECT_TRUE(gpuMatches(y, kernels::binary(op, a, b), kExact, kernels::binaryOpName(op)));
    }
  }
  Tensor a = hostRandom({2, 8, 3, 5}, DType::f32, 5).toFormat(MemoryFormat::channels_last);
  Tensor b = hostRandom({2, 8, 3, 5}, DType::bf16, 6).toFormat(MemoryFormat::channels_last);
  Tensor y = kernels::binary(kernels::BinaryOp::add, gpu(b), gpu(a));
  EXPECT_TRUE(y.isChannelsLast());
  EXPECT_TRUE(gpuMatches(y, kernels::binary(kernels::BinaryOp::add, b, a), kExact, "channels_last"));
  // A misaligned narrow view takes the one-element loop.
  Tensor a2 = hostRandom({1001}, DType::f32, 7), b2 = hostRandom({1002}, DType::bf16, 8).narrow(0, 1, 1001);
  Tensor g2 = gpu(hostRandom({1002}, DType::bf16, 8)).narrow(0, 1, 1001);
  EXPECT_TRUE(gpuMatches(kernels::binary(kernels::BinaryOp::add, gpu(a2), g2),
                         kernels::binary(kernels::BinaryOp::add, a2, b2), kExact, "misaligned"));
}

TEST(GpuAddInto, accumulates_in_place_with_alpha_strides_and_mixed_dtypes) {
  LOCKSTEP_REQUIRE_GPU();
  for (DType t : kFloatDTypes) {
    for (DType s : {t, DType::f32, DType::bf16, DType::f16}) {  // f32 += bf16/f16 reads them as they are
      Tensor dst = hostRandom({5, 7}, t, 1), src = hostRandom({5, 7}, s, 2);
      Tensor d = gpu(dst);
      kernels::addInto(d, gpu(src), 0.5);
      kernels::addInto(dst, src, 0.5);
      EXPECT_TRUE(gpuMatches(d, dst, std::string(dtypeName(t)) + " += " + dtypeName(s)));
    }
    // A column block of a wider tensor (non-dense destination) and a transposed source.
    Tensor wide = hostRandom({4, 9}, t, 3), src = hostRandom({6, 4}, t, 4).transpose(0, 1);
    Tensor dwide = gpu(wide);
    Tensor dview = dwide.narrow(1, 2, 6), hview = wide.narrow(1, 2, 6);
    kernels::addInto(dview, gpu(src));
    kernels::addInto(hview, src);
    EXPECT_TRUE(gpuMatches(dwide, wide, dtypeName(t)));
    // Rows with a contiguous last dimension (the packed row kernel): the middle third of a fused
    // [2, 5, 3 x 16] projection's gradient, from a contiguous source, from a permuted one whose rows
    // are contiguous, and from another dtype; then a slice not aligned to a pack (the element loop).
    for (int variant = 0; variant < 4; ++variant) {
      Tensor fused = hostRandom({2, 5, 48}, t, 5 + variant), dfused = gpu(fused);
      const int64_t start = variant == 3 ? 17 : 16;
      Tensor from = variant == 1   ? hostRandom({5, 2, 16}, t, 9).transpose(0, 1)
                    : variant == 2 ? hostRandom({2, 5, 16}, t == DType::f32 ? DType::bf16 : DType::f32, 9)
                                   : hostRandom({2, 5, 16}, t, 9);
      Tensor dv = dfused.narrow(2, start, 16), hv = fused.narrow(2, start, 16);
      kernels::addInto(dv, gpu(from), 0.5);
      kernels::addInto(hv, from, 0.5);
      EXPECT_TRUE(gpuMatches(dfused, fused, std::string(dtypeName(t)) + " rows " + std::to_string(variant)));
    }
  }
  Tensor d = gpu(hostRandom({3}, DType::f32, 1));
  EXPECT_THROW(kernels::addInto(d, hostRandom({3}, DType::f32, 2)), ValueError);
  EXPECT_THROW(kernels::addInto(d, gpu(hostRandom({4}, DType::f32, 2))), ValueError);
}

// Scaling by a 0-d tensor on the GPU (the fused LM loss's gradient by dL/dloss): the CPU's values
// bitwise in every dtype, flat and on a dense permuted layout; a host factor is refused.
TEST(GpuScale, by_a_device_factor_equals_the_host) {
  LOCKSTEP_REQUIRE_GPU();
  for (DType t : kFloatDTypes) {
    for (DType ft : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
      Tensor host = hostRandom({37, 41}, t, 3), factor = Tensor::scalar(0.3125 / 3.0, ft);
      Tensor dev = gpu(host), dev_t = gpu(host).transpose(0, 1);
      kernels::scaleInPlace(host, factor);
      kernels::scaleInPlace(dev, gpu(factor));
      kernels::scaleInPlace(dev_t, gpu(factor));
      EXPECT_TRUE(gpuMatches(dev, host, kExact, std::string(dtypeName(t)) + " by " + dtypeName(ft)));
      EXPECT_TRUE(gpuMatches(dev_t.transpose(0, 1), host, kExact, std::string(dtypeName(t)) + " permuted"));
    }
  }
  Tensor x = gpu(hostRandom({4}, DType::f32, 4));
  EXPECT_THROW(kernels::scaleInPlace(x, Tensor::scalar(2.0)), ValueError);
}

TEST(GpuActivation, rejects_operands_on_different_devices_and_integers) {
  LOCKSTEP_REQUIRE_GPU();
  Tensor x = hostRandom({4}, DType::f32, 1);
  EXPECT_THROW(kernels::reluBackward(gpu(x), x), ValueError);
  EXPECT_THROW(kernels::reluBackward(x, gpu(x)), ValueError);
  EXPECT_THROW(kernels::reluForward(gpu(Tensor::arange(4, DType::i64))), NotSupportedError);
}
