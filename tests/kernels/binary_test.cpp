#include "lockstep/kernels/tables/binary.h"

#include "common/check.h"
#include "lockstep/kernels.h"

using namespace lockstep;
using kernels::BinaryOp;
using lockstep::testing::randomTensor;
using lockstep::testing::tensorsNear;

namespace {

const BinaryOp kOps[] = {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div};

// Divisors stay away from 0 so f32 rounding does not blow up the comparison.
Tensor operandB(const Shape& s, BinaryOp op, DType dt = DType::f32) {
  return op == BinaryOp::div ? randomTensor(s, dt, 12, 0.5, 2.0) : randomTensor(s, dt, 12);
}

void expectMatches(BinaryOp op, const Tensor& a, const Tensor& b) {
  SCOPED_TRACE(std::string(kernels::binaryOpName(op)) + " " + shapeToString(a.shape()) + " " +
               shapeToString(b.shape()));
  Tensor fast = kernels::onednn::kBinary.binary(op, a, b);
  Tensor ref = kernels::reference::kBinary.binary(op, a, b);
  EXPECT_TRUE(tensorsNear(fast, ref, 1e-6, 1e-6));
  if (fast.numel() > 0) {
    EXPECT_TRUE(fast.isDense());
  }
}

}  // namespace

TEST(Binary, forward_matches_reference) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{7}, {7}},
      {{3, 5}, {3, 5}},
      {{3, 1}, {1, 4}},
      {{1, 4}, {3, 1}},
      {{2, 3, 4}, {4}},
      {{2, 3, 4}, {3, 1}},
      {{1}, {5, 3}},
      {{5, 3}, {1}},
      {{}, {3}},
      {{3}, {}},
      {{}, {}},
      {{1, 9}, {9}},
      {{2, 3, 5, 7}, {1, 3, 1, 1}},
      {{2, 1, 5, 1}, {1, 3, 1, 7}},
      {{4, 0}, {1, 0}},
      {{256, 1}, {1, 300}},  // large enough for the threaded strided loop
      {{300, 257}, {257}},
  };
  for (BinaryOp op : kOps) {
    for (const auto& [sa, sb] : cases) expectMatches(op, randomTensor(sa, DType::f32, 11), operandB(sb, op));
  }
}

TEST(Binary, strided_operands_match_reference) {
  for (BinaryOp op : kOps) {
    Tensor a = randomTensor({5, 7}, DType::f32, 3).transpose(0, 1);  // [7, 5], not contiguous
    Tensor b = operandB({7, 5}, op);
    expectMatches(op, a, b);
    expectMatches(op, b, a);
    expectMatches(op, a, operandB({5}, op));
    // Large enough for the tiled loop (> 32 along both transposed dims), with a batch dim.
    Tensor big = randomTensor({3, 45, 70}, DType::f32, 5).transpose(1, 2);  // [3, 70, 45]
    expectMatches(op, big, operandB({3, 70, 45}, op));
    expectMatches(op, operandB({70, 45}, op), big);
    expectMatches(op, big, operandB({1, 1, 45}, op));
    Tensor n = randomTensor({6, 9}, DType::f32, 4).narrow(1, 2, 5);  // [6, 5] with gaps
    expectMatches(op, n, operandB({1, 5}, op));
    expectMatches(op, operandB({6, 1}, op), n);
  }
}

TEST(Binary, keeps_channels_last_layout) {
  Tensor x = randomTensor({2, 3, 4, 5}, DType::f32).toFormat(MemoryFormat::channels_last);
  Tensor bias = randomTensor({1, 3, 1, 1}, DType::f32, 2);
  for (BinaryOp op : {BinaryOp::add, BinaryOp::mul}) {
    Tensor y = kernels::binary(op, x, bias);
    EXPECT_TRUE(y.isChannelsLast());
    EXPECT_TRUE(tensorsNear(y, kernels::reference::kBinary.binary(op, x, bias), 1e-6, 1e-6));
    Tensor z = kernels::binary(op, bias, x);  // broadcast operand first
    EXPECT_TRUE(z.isChannelsLast());
    EXPECT_TRUE(tensorsNear(z, y, 1e-6, 1e-6));
  }
}

TEST(Binary, f64_dispatches_to_reference) {
  Tensor a = randomTensor({3, 1}, DType::f64), b = randomTensor({1, 4}, DType::f64, 2);
  Tensor y = kernels::binary(BinaryOp::mul, a, b);
  EXPECT_EQ(y.dtype(), DType::f64);
  EXPECT_TRUE(tensorsNear(y, kernels::reference::kBinary.binary(BinaryOp::mul, a, b), 0.0));
}

TEST(Binary, scalar_matches_reference) {
  for (BinaryOp op : kOps) {
    for (const Shape& s : std::vector<Shape>{{}, {1}, {7}, {3, 5}, {2, 3, 5, 7}}) {
      Tensor a = randomTensor(s, DType::f32, 5);
      EXPECT_TRUE(tensorsNear(kernels::onednn::kBinary.binaryScalar(op, a, 1.75),
                              kernels::reference::kBinary.binaryScalar(op, a, 1.75), 1e-6, 1e-6));
      EXPECT_TRUE(tensorsNear(kernels::binaryScalar(op, a, -0.5),
                              kernels::reference::kBinary.binaryScalar(op, a, -0.5), 1e-6, 1e-6));
    }
    Tensor t = randomTensor({4, 6}, DType::f32).transpose(0, 1);
    EXPECT_TRUE(tensorsNear(kernels::binaryScalar(op, t, 3.0),
                            kernels::reference::kBinary.binaryScalar(op, t, 3.0), 1e-6, 1e-6));
  }
}

TEST(Binary, rejects_incompatible_shapes) {
  Tensor a = Tensor::zeros({3, 4}), b = Tensor::zeros({5});
  for (BinaryOp op : kOps) {
    try {
      kernels::binary(op, a, b);
      FAIL() << "expected ValueError";
    } catch (const ValueError& e) {
      std::string m = e.what();
      EXPECT_NE(m.find(kernels::binaryOpName(op)), std::string::npos) << m;
      EXPECT_NE(m.find("[3, 4]"), std::string::npos) << m;
      EXPECT_NE(m.find("[5]"), std::string::npos) << m;
    }
  }
}

TEST(Binary, rejects_mismatched_dtypes_unless_both_are_floating) {
  Tensor a = Tensor::zeros({3}, DType::f32), b = Tensor::zeros({3}, DType::i64);
  try {
    kernels::binary(BinaryOp::add, a, b);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("add"), std::string::npos) << m;
    EXPECT_NE(m.find("f32"), std::string::npos) << m;
    EXPECT_NE(m.find("i64"), std::string::npos) << m;
  }
  EXPECT_EQ(kernels::binaryResultDType(DType::f32, DType::f64), DType::f64);
  EXPECT_EQ(kernels::binaryResultDType(DType::bf16, DType::f32), DType::f32);
  EXPECT_EQ(kernels::binaryResultDType(DType::bf16, DType::f16), DType::f32) << "PyTorch's rule";
  EXPECT_EQ(kernels::binaryResultDType(DType::f16, DType::f64), DType::f64);
}

// Mixed floating operands give what widening the narrow one first gives, bit for bit: the one-pass
// kernel (an f32 operand with a bf16/f16 one of the same shape and layout, either order) and the
// widened copies of every other mix.
TEST(Binary, mixed_floating_dtypes_equal_widening_first) {
  struct Case {
    DType a, b;
    Shape sa, sb;
  };
  const std::vector<Case> cases = {
      {DType::f32, DType::bf16, {3, 1000}, {3, 1000}},  // one pass, several blocks, a ragged tail
      {DType::bf16, DType::f32, {3, 1000}, {3, 1000}},
      {DType::f32, DType::f16, {140001}, {140001}},  // one pass, threaded (two threads from 2^17)
      {DType::f16, DType::f32, {5}, {5}},
      {DType::f32, DType::bf16, {4, 6}, {6}},  // broadcast: widened first
      {DType::f32, DType::f64, {4, 6}, {4, 6}},
      {DType::bf16, DType::f16, {4, 6}, {4, 6}},
      {DType::f32, DType::bf16, {0, 3}, {0, 3}},
  };
  for (BinaryOp op : kOps) {
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(kernels::binaryOpName(op)) + " " + dtypeName(c.a) + " " + dtypeName(c.b) +
                   " " + shapeToString(c.sa));
      Tensor a = randomTensor(c.sa, c.a, 21), b = operandB(c.sb, op, c.b);
      const DType r = kernels::binaryResultDType(c.a, c.b);
      Tensor y = kernels::binary(op, a, b);
      EXPECT_EQ(y.dtype(), r);
      EXPECT_EQ(y.shape(), kernels::binary(op, a.to(r), b.to(r)).shape());
      EXPECT_TRUE(tensorsNear(y, kernels::binary(op, a.to(r), b.to(r)), 0, 0));
    }
  }
  // The one pass keeps the operands' channels_last layout.
  Tensor a = randomTensor({2, 8, 3, 5}, DType::f32, 4).toFormat(MemoryFormat::channels_last);
  Tensor b = randomTensor({2, 8, 3, 5}, DType::bf16, 5).toFormat(MemoryFormat::channels_last);
  Tensor y = kernels::binary(BinaryOp::add, a, b);
  EXPECT_EQ(y.strides(), a.strides());
  EXPECT_TRUE(tensorsNear(y, kernels::binary(BinaryOp::add, a, b.to(DType::f32)), 0, 0));
  // The reference backend's one-pass kernel agrees.
  EXPECT_TRUE(tensorsNear(kernels::reference::kBinary.binaryMixed(BinaryOp::sub, b, a),
                          kernels::onednn::kBinary.binaryMixed(BinaryOp::sub, b, a), 0, 0));
}

TEST(Binary, integer_dtypes_stay_exact) {
  Tensor a = Tensor::fromVector<int64_t>({(int64_t{1} << 40) + 1, 2, 3}, {3, 1});
  Tensor b = Tensor::fromVector<int64_t>({10, 20}, {1, 2});
  Tensor y = kernels::binary(BinaryOp::add, a, b);
  EXPECT_EQ(y.toVector<int64_t>(),
            (std::vector<int64_t>{(int64_t{1} << 40) + 11, (int64_t{1} << 40) + 21, 12, 22, 13, 23}));
  EXPECT_EQ(kernels::binaryScalar(BinaryOp::mul, a, 2.0).toVector<int64_t>(),
            (std::vector<int64_t>{(int64_t{1} << 41) + 2, 4, 6}));
  EXPECT_THROW(kernels::binary(BinaryOp::div, a, b), ValueError);
  EXPECT_THROW(kernels::binaryScalar(BinaryOp::div, a, 2.0), ValueError);
}
