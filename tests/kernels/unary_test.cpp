#include "lockstep/kernels/tables/unary.h"

#include <cmath>
#include <limits>

#include "common/check.h"
#include "lockstep/kernels.h"

using namespace lockstep;
using kernels::UnaryOp;
using lockstep::testing::randomTensor;
using lockstep::testing::tensorsNear;

namespace {
// log, sqrt and fractional pow need positive inputs.
Tensor inputFor(UnaryOp op, const Shape& s) {
  return op == UnaryOp::neg || op == UnaryOp::exp ? randomTensor(s, DType::f32, 3)
                                                  : randomTensor(s, DType::f32, 3, 0.5, 2.0);
}
}  // namespace

TEST(Unary, forward_and_backward_match_reference) {
  const std::vector<std::pair<UnaryOp, double>> ops = {
      {UnaryOp::neg, 0},   {UnaryOp::exp, 0},    {UnaryOp::log, 0},  {UnaryOp::sqrt, 0},
      {UnaryOp::pow, 2.0}, {UnaryOp::pow, -0.5}, {UnaryOp::pow, 3.0}};
  for (const auto& [op, p] : ops) {
    for (const Shape& s : std::vector<Shape>{{}, {1}, {7}, {3, 5}, {2, 3, 5, 7}}) {
      SCOPED_TRACE(std::string(kernels::unaryOpName(op)) + " p=" + std::to_string(p) + " " +
                   shapeToString(s));
      Tensor x = inputFor(op, s);
      Tensor y = kernels::cpu::kUnary.unary(op, x, p);
      EXPECT_TRUE(tensorsNear(y, kernels::reference::kUnary.unary(op, x, p), 1e-5, 1e-5));
      Tensor gy = randomTensor(s, DType::f32, 4);
      Tensor saved = kernels::unaryBackwardUsesOutput(op) ? y : x;
      EXPECT_TRUE(tensorsNear(kernels::cpu::kUnary.unaryBackward(op, gy, saved, p),
                              kernels::reference::kUnary.unaryBackward(op, gy, saved, p), 1e-5, 1e-5));
    }
  }
}

TEST(Unary, strided_input_and_gradient) {
  Tensor x = randomTensor({4, 6}, DType::f32, 3, 0.5, 2.0).transpose(0, 1);
  Tensor gy = randomTensor({6, 4}, DType::f32, 4);
  for (UnaryOp op : {UnaryOp::exp, UnaryOp::log, UnaryOp::sqrt}) {
    Tensor y = kernels::unary(op, x);
    EXPECT_TRUE(tensorsNear(y, kernels::reference::kUnary.unary(op, x, 0.0), 1e-5, 1e-5));
    Tensor saved = kernels::unaryBackwardUsesOutput(op) ? y : x;
    EXPECT_TRUE(tensorsNear(kernels::unaryBackward(op, gy, saved),
                            kernels::reference::kUnary.unaryBackward(op, gy, saved, 0.0), 1e-5, 1e-5));
  }
}

// As torch: exp(NaN) is NaN (oneDNN's gave +inf), log is libm's near 1 and for denormals (oneDNN's
// was 1.4e-6 off around 1), neg(+0) is -0, and pow's gradient is p x^(p-1), finite where x^p
// overflows (not p y / x).
TEST(Unary, special_values_as_torch) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const Tensor x = Tensor::fromVector(std::vector<float>{nan, 0.0f}, {2});
  const std::vector<float> e = kernels::unary(UnaryOp::exp, x).toVector<float>();
  EXPECT_TRUE(std::isnan(e[0]));
  EXPECT_EQ(e[1], 1.0f);
  const std::vector<float> l =
      kernels::unary(UnaryOp::log, Tensor::fromVector(std::vector<float>{1.0f, 1.0001f, 1e-40f}, {3}))
          .toVector<float>();
  EXPECT_EQ(l[0], 0.0f);
  EXPECT_EQ(l[1], std::log(1.0001f));
  EXPECT_NEAR(l[2], -92.1034f, 1e-3f);
  EXPECT_TRUE(std::signbit(kernels::unary(UnaryOp::neg, Tensor::zeros({1})).toVector<float>()[0]));
  const Tensor big = Tensor::fromVector(std::vector<float>{inf, -inf, 1e30f}, {3});
  const std::vector<float> g2 =
      kernels::unaryBackward(UnaryOp::pow, Tensor::ones({3}), big, 2.0).toVector<float>();
  EXPECT_EQ(g2, (std::vector<float>{inf, -inf, 2e30f}));
  const std::vector<float> g15 =
      kernels::unaryBackward(UnaryOp::pow, Tensor::ones({1}),
                             Tensor::fromVector(std::vector<float>{1e30f}, {1}), 1.5)
          .toVector<float>();
  EXPECT_NEAR(g15[0], 1.5e15f, 1e9f);
  // bf16 is widened to the same loops.
  EXPECT_TRUE(
      std::isnan(kernels::unary(UnaryOp::exp, x.to(DType::bf16)).to(DType::f32).toVector<float>()[0]));
}
