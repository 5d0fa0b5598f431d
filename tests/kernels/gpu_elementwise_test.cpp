// The element-wise CUDA kernels (accumulate, binary, unary, activations) against the CPU kernels
// (exp, log, pow, erf and tanh against the f64 oracle, their layouts against the CPU kernels): every
// floating dtype, odd sizes, broadcasting, non-contiguous and channels-last operands, and the
// errors. Runs with ctest -L gpu; skips without a GPU.
#include <gtest/gtest.h>

#include "gpu_compare.h"
#include "lockstep/kernels.h"

using namespace lockstep;
using lockstep::testing::f64;
using lockstep::testing::gpu;
using lockstep::testing::gpuMatches;
using lockstep::testing::hostRandom;
using lockstep::testing::kFloatDTypes;
using lockstep::testing::oracle;

namespace {

// Operand pairs: same shape, broadcast both ways, a scalar, a transposed view, an empty tensor.
std::vector<std::pair<Tensor, Tensor>> binaryOperands(DType t) {
  std::vector<std::pair<Tensor, Tensor>> v;
  v.emplace_back(hostRandom({3, 5}, t, 1), hostRandom({3, 5}, t, 2, 0.5, 2.0));
  v.emplace_back(hostRandom({2, 3, 5, 7}, t, 3), hostRandom({3, 1, 7}, t, 4, 0.5, 2.0));
  v.emplace_back(hostRandom({4, 1}, t, 5), hostRandom({1, 6}, t, 6, 0.5, 2.0));
  v.emplace_back(hostRandom({1}, t, 7), hostRandom({1001}, t, 8, 0.5, 2.0));
  v.emplace_back(hostRandom({6, 4}, t, 9).transpose(0, 1), hostRandom({4, 6}, t, 10, 0.5, 2.0));
  v.emplace_back(hostRandom({0, 3}, t, 11), hostRandom({3}, t, 12, 0.5, 2.0));
  return v;
}

// Inputs for the element-wise maps: odd sizes, a transposed view, a channels-last image.
std::vector<Tensor> mapInputs(DType t, double low, double high) {
  std::vector<Tensor> xs;
  for (const Shape& s : std::vector<Shape>{{1}, {7}, {3, 5}, {2, 3, 5, 7}, {4099}})
    xs.push_back(hostRandom(s, t, 3, low, high));
  xs.push_back(hostRandom({5, 3}, t, 4, low, high).transpose(0, 1));
  xs.push_back(hostRandom({2, 3, 4, 5}, t, 5, low, high).toFormat(MemoryFormat::channels_last));
  return xs;
}

}  // namespace

TEST(GpuBinary, matches_cpu_with_broadcasting_in_every_float_dtype) {
  LOCKSTEP_REQUIRE_GPU();
  for (DType t : kFloatDTypes) {
    for (auto& [a, b] : binaryOperands(t)) {
      for (auto op :
           {kernels::BinaryOp::add, kernels::BinaryOp::sub, kernels::BinaryOp::mul, kernels::BinaryOp::div}) {
        const std::string what = std::string(kernels::binaryOpName(op)) + " " + dtypeName(t) + " " +
                                 shapeToString(a.shape()) + " " + shapeToString(b.shape());
        EXPECT_TRUE(gpuMatches(kernels::binary(op, gpu(a), gpu(b)), kernels::binary(op, a, b), what));
        EXPECT_TRUE(
            gpuMatches(kernels::binary(op, gpu(b), gpu(a)), kernels::binary(op, b, a), what + " swapped"));
        EXPECT_TRUE(
            gpuMatches(kernels::binaryScalar(op, gpu(a), 1.75), kernels::binaryScalar(op, a, 1.75), what));
      }
    }
  }
}

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
  EXPECT_THROW(kernels::binary(kernels::BinaryOp::add, gpu(a), gpu(a.to(DType::f64))), ValueError);
  EXPECT_THROW(kernels::binary(kernels::BinaryOp::add, gpu(a), gpu(hostRandom({4}, DType::f32, 2))),
               ValueError);
  try {
    kernels::binary(kernels::BinaryOp::mul, gpu(a), a);
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cpu"), std::string::npos) << e.what();
  }
}

TEST(GpuAddInto, accumulates_in_place_with_alpha_strides_and_mixed_dtypes) {
  LOCKSTEP_REQUIRE_GPU();
  for (DType t : kFloatDTypes) {
    for (DType s : {t, DType::f32}) {
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
  }
  Tensor d = gpu(hostRandom({3}, DType::f32, 1));
  EXPECT_THROW(kernels::addInto(d, hostRandom({3}, DType::f32, 2)), ValueError);
  EXPECT_THROW(kernels::addInto(d, gpu(hostRandom({4}, DType::f32, 2))), ValueError);
}

TEST(GpuUnary, forward_and_backward_match_cpu) {
  LOCKSTEP_REQUIRE_GPU();
  using kernels::UnaryOp;
  for (DType t : kFloatDTypes) {
    for (const Tensor& x : mapInputs(t, 0.25, 3.0)) {
      Tensor gy = hostRandom(x.shape(), t, 9);
      for (UnaryOp op : {UnaryOp::neg, UnaryOp::exp, UnaryOp::log, UnaryOp::sqrt, UnaryOp::pow}) {
        const std::string what =
            std::string(kernels::unaryOpName(op)) + " " + dtypeName(t) + " " + x.describe();
        // Values against the f64 oracle (oneDNN's f32 log on the CPU is off by up to 3.5e-6); the
        // layout against the CPU kernel's.
        const Tensor y = oracle(kernels::unary(op, f64(x), 2.5), t);
        Tensor y_dev = kernels::unary(op, gpu(x), 2.5);
        EXPECT_TRUE(gpuMatches(y_dev, y, what));
        EXPECT_EQ(y_dev.strides(), kernels::unary(op, x, 2.5).strides()) << what;
        Tensor saved = kernels::unaryBackwardUsesOutput(op) ? y : x;
        EXPECT_TRUE(gpuMatches(kernels::unaryBackward(op, gpu(gy), gpu(saved), 2.5),
                               oracle(kernels::unaryBackward(op, f64(gy), f64(saved), 2.5), t),
                               what + " backward"));
      }
    }
  }
}

TEST(GpuActivation, forward_and_backward_match_cpu) {
  LOCKSTEP_REQUIRE_GPU();
  using Fwd = Tensor (*)(const Tensor&);
  using Bwd = Tensor (*)(const Tensor&, const Tensor&);
  struct Case {
    const char* name;
    Fwd fwd;
    Bwd bwd;
    bool from_output;
  };
  const Case cases[] = {{"relu", kernels::reluForward, kernels::reluBackward, true},
                        {"gelu", kernels::geluForward, kernels::geluBackward, false},
                        {"gelu_tanh", kernels::geluTanhForward, kernels::geluTanhBackward, false},
                        {"silu", kernels::siluForward, kernels::siluBackward, false},
                        {"tanh", kernels::tanhForward, kernels::tanhBackward, true},
                        {"sigmoid", kernels::sigmoidForward, kernels::sigmoidBackward, true}};
  for (DType t : kFloatDTypes) {
    for (const Tensor& x : mapInputs(t, -4.0, 4.0)) {
      Tensor gy = hostRandom(x.shape(), t, 9);
      for (const Case& c : cases) {
        const std::string what = std::string(c.name) + " " + dtypeName(t) + " " + x.describe();
        // Values against the f64 oracle (erf, tanh and exp are approximations in the CPU's f32
        // kernels), the layout against the CPU kernel's: a dense input's, for every activation.
        const Tensor y = oracle(c.fwd(f64(x)), t);
        Tensor y_dev = c.fwd(gpu(x));
        EXPECT_TRUE(gpuMatches(y_dev, y, what));
        EXPECT_EQ(y_dev.strides(), c.fwd(x).strides()) << what;
        EXPECT_EQ(y_dev.strides(), x.strides()) << what;
        Tensor saved = c.from_output ? y : x;
        Tensor gx_dev = c.bwd(gpu(gy), gpu(saved));
        EXPECT_TRUE(gpuMatches(gx_dev, oracle(c.bwd(f64(gy), f64(saved)), t), what + " backward"));
        EXPECT_EQ(gx_dev.strides(), c.bwd(gy, saved).strides()) << what + " backward";
      }
      for (double slope : {0.01, 0.2}) {
        EXPECT_TRUE(
            gpuMatches(kernels::leakyReluForward(gpu(x), slope), kernels::leakyReluForward(x, slope)));
        EXPECT_TRUE(gpuMatches(kernels::leakyReluBackward(gpu(gy), gpu(x), slope),
                               kernels::leakyReluBackward(gy, x, slope)));
      }
    }
  }
}

TEST(GpuActivation, rejects_operands_on_different_devices_and_integers) {
  LOCKSTEP_REQUIRE_GPU();
  Tensor x = hostRandom({4}, DType::f32, 1);
  EXPECT_THROW(kernels::reluBackward(gpu(x), x), ValueError);
  EXPECT_THROW(kernels::reluBackward(x, gpu(x)), ValueError);
  EXPECT_THROW(kernels::reluForward(gpu(Tensor::arange(4, DType::i64))), NotSupportedError);
}
