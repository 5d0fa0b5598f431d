#include "lockstep/kernels/tables/unary.h"

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
      Tensor y = kernels::onednn::kUnary.unary(op, x, p);
      EXPECT_TRUE(tensorsNear(y, kernels::reference::kUnary.unary(op, x, p), 1e-5, 1e-5));
      Tensor gy = randomTensor(s, DType::f32, 4);
      Tensor saved = kernels::unaryBackwardUsesOutput(op) ? y : x;
      EXPECT_TRUE(tensorsNear(kernels::onednn::kUnary.unaryBackward(op, gy, saved, p),
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
