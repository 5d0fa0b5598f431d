#include "common/check.h"
#include "lockstep/autograd.h"

using namespace lockstep;
using namespace lockstep::autograd;
using lockstep::testing::gradientsMatch;
using lockstep::testing::randomTensor;
using lockstep::testing::tensorsNear;

namespace {

using Fn = Variable (*)(const Variable&, const Variable&);

struct BinaryCase {
  const char* name;
  Fn fn;
};

const BinaryCase kOps[] = {{"add", [](const Variable& a, const Variable& b) { return a + b; }},
                           {"sub", [](const Variable& a, const Variable& b) { return a - b; }},
                           {"mul", [](const Variable& a, const Variable& b) { return a * b; }},
                           {"div", [](const Variable& a, const Variable& b) { return a / b; }}};

// Both operands stay away from 0 so div's finite differences are well conditioned.
Tensor operand(const Shape& s, uint64_t seed) { return randomTensor(s, DType::f64, seed, 0.5, 1.5); }

void expectGradients(const BinaryCase& op, const Shape& sa, const Shape& sb) {
  SCOPED_TRACE(std::string(op.name) + " " + shapeToString(sa) + " " + shapeToString(sb));
  EXPECT_TRUE(gradientsMatch([&](const std::vector<Variable>& in) { return op.fn(in[0], in[1]); },
                             {operand(sa, 1), operand(sb, 2)}));
}

// Every broadcast pattern: same shape, one side, both ways, scalar-like [1] and 0-d, odd sizes.
void expectBroadcastGradients(const BinaryCase& op) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 4}, {3, 4}}, {{3, 4}, {4}},    {{2, 3, 4}, {3, 1}},
      {{4}, {2, 3, 4}}, {{3, 1}, {1, 4}}, {{2, 1, 5}, {3, 1}},
      {{3, 5}, {1}},    {{1}, {3, 5}},    {{}, {2, 3}},
      {{2, 3}, {}},     {{}, {}},         {{1, 7, 3}, {5, 1, 3}}};
  for (const auto& [sa, sb] : cases) expectGradients(op, sa, sb);
}

}  // namespace

TEST(Add, gradient) { expectGradients(kOps[0], {3, 4}, {3, 4}); }
TEST(Add, broadcast_gradient) { expectBroadcastGradients(kOps[0]); }
TEST(Add, broadcast_both_ways_gradient) {
  expectGradients(kOps[0], {3, 1}, {1, 4});
  expectGradients(kOps[0], {1, 4}, {3, 1});
}
TEST(Add, scalar_like_operands_gradient) {
  expectGradients(kOps[0], {3, 5}, {1});
  expectGradients(kOps[0], {}, {2, 3});
}
TEST(Sub, broadcast_gradient) { expectBroadcastGradients(kOps[1]); }
TEST(Mul, broadcast_gradient) { expectBroadcastGradients(kOps[2]); }
TEST(Div, broadcast_gradient) { expectBroadcastGradients(kOps[3]); }

TEST(Add, rejects_incompatible_shapes) {
  Variable a(Tensor::zeros({3, 4}, DType::f64), true), b(Tensor::zeros({5}, DType::f64), true);
  for (const auto& op : kOps) {
    try {
      op.fn(a, b);
      FAIL() << "expected ValueError";
    } catch (const ValueError& e) {
      std::string m = e.what();
      EXPECT_NE(m.find(op.name), std::string::npos) << m;
      EXPECT_NE(m.find("[3, 4]"), std::string::npos) << m;
      EXPECT_NE(m.find("[5]"), std::string::npos) << m;
    }
  }
}

TEST(Add, mixed_floating_dtypes_promote_to_the_wider_and_grads_keep_each_dtype) {
  // PyTorch's type promotion: f32 op f64 computes in f64; each operand's gradient comes back in
  // its own dtype.
  for (const auto& op : kOps) {
    Variable a(Tensor::ones({3}, DType::f32), true), b(Tensor::full({3}, 2.0, DType::f64), true);
    Variable y = op.fn(a, b);
    EXPECT_EQ(y.dtype(), DType::f64) << op.name;
    autograd::sum(y).backward();
    EXPECT_EQ(a.grad().dtype(), DType::f32) << op.name;
    EXPECT_EQ(b.grad().dtype(), DType::f64) << op.name;
  }
  // Integer and floating operands are not promoted: an error naming both dtypes.
  Variable i(Tensor::zeros({3}, DType::i64)), f(Tensor::zeros({3}, DType::f32));
  try {
    autograd::add(i, f);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("i64"), std::string::npos) << m;
    EXPECT_NE(m.find("f32"), std::string::npos) << m;
  }
}

TEST(Mul, gradient_to_one_input_only) {
  // b does not require grad: a's gradient is still right and b gets none.
  Tensor ta = operand({2, 3}, 1), tb = operand({3}, 2);
  EXPECT_TRUE(gradientsMatch([](const std::vector<Variable>& in) { return in[0] * in[1]; }, {ta, tb}, 1e-6,
                             1e-6, 1e-5, /*no_grad=*/{1}));
  EXPECT_TRUE(gradientsMatch([](const std::vector<Variable>& in) { return in[0] / in[1]; }, {ta, tb}, 1e-6,
                             1e-6, 1e-5, /*no_grad=*/{0}));
}

TEST(Mul, same_variable_twice_gradient) {
  Variable x(Tensor::fromVector<double>({1.0, -2.0, 3.0}, {3}), true);
  sum(x * x).backward();
  EXPECT_TRUE(tensorsNear(x.grad(), Tensor::fromVector<double>({2.0, -4.0, 6.0}, {3}), 1e-12));
}

TEST(ScalarOps, gradient) {
  Tensor x = operand({2, 3}, 4);
  EXPECT_TRUE(gradientsMatch([](const std::vector<Variable>& in) { return in[0] + 2.5; }, {x}));
  EXPECT_TRUE(gradientsMatch([](const std::vector<Variable>& in) { return in[0] - 2.5; }, {x}));
  EXPECT_TRUE(gradientsMatch([](const std::vector<Variable>& in) { return in[0] * -3.0; }, {x}));
  EXPECT_TRUE(gradientsMatch([](const std::vector<Variable>& in) { return 0.5 * in[0]; }, {x}));
  EXPECT_TRUE(gradientsMatch([](const std::vector<Variable>& in) { return in[0] / 4.0; }, {x}));
  EXPECT_TRUE(gradientsMatch([](const std::vector<Variable>& in) { return -in[0]; }, {x}));
}

TEST(ScalarOps, forward_values) {
  Variable x(Tensor::fromVector<float>({1.f, -2.f}, {2}));
  EXPECT_EQ((x + 1.0).tensor().toVector<float>(), (std::vector<float>{2.f, -1.f}));
  EXPECT_EQ((x * 3.0).tensor().toVector<float>(), (std::vector<float>{3.f, -6.f}));
  EXPECT_EQ((-x).tensor().toVector<float>(), (std::vector<float>{-1.f, 2.f}));
  EXPECT_EQ((x / 2.0).tensor().toVector<float>(), (std::vector<float>{0.5f, -1.f}));
}

TEST(Pow, gradient) {
  Tensor x = operand({2, 3}, 5);
  for (double p : {2.0, 3.0, 0.5, -1.5}) {
    EXPECT_TRUE(gradientsMatch([p](const std::vector<Variable>& in) { return pow(in[0], p); }, {x})) << p;
  }
}

TEST(Exp, gradient) {
  EXPECT_TRUE(gradientsMatch([](const std::vector<Variable>& in) { return exp(in[0]); },
                             {randomTensor({3, 4}, DType::f64, 6)}));
}

TEST(Log, gradient) {
  EXPECT_TRUE(
      gradientsMatch([](const std::vector<Variable>& in) { return log(in[0]); }, {operand({3, 4}, 7)}));
}

TEST(Sqrt, gradient) {
  EXPECT_TRUE(
      gradientsMatch([](const std::vector<Variable>& in) { return sqrt(in[0]); }, {operand({3, 4}, 8)}));
}

TEST(Arith, composite_f32_matches_f64) {
  // The f32 fast path (oneDNN) and the f64 reference path agree through a whole graph.
  Tensor a = operand({4, 1, 5}, 9), b = operand({3, 1}, 10);
  auto run = [&](DType dt) {
    Variable va(a.to(dt), true), vb(b.to(dt), true);
    Variable y = sum(sqrt(exp(va * vb) / (va + 1.0)) - log(vb) * pow(va, 2.0));
    y.backward();
    return std::vector<Tensor>{y.tensor(), va.grad(), vb.grad()};
  };
  auto r32 = run(DType::f32), r64 = run(DType::f64);
  for (size_t i = 0; i < r32.size(); ++i) EXPECT_TRUE(tensorsNear(r32[i], r64[i], 1e-4, 1e-4)) << i;
}
