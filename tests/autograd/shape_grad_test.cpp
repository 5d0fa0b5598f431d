#include "common/check.h"
#include "lockstep/autograd.h"

using namespace lockstep;
using namespace lockstep::autograd;
using lockstep::testing::gradientsMatch;
using lockstep::testing::randomTensor;
using lockstep::testing::tensorsNear;

TEST(Reshape, gradient) {
  Tensor x = randomTensor({2, 3, 4}, DType::f64, 1);
  EXPECT_TRUE(gradientsMatch([](const std::vector<Variable>& in) { return reshape(in[0], {4, -1}); }, {x}));
  // A non-contiguous input (a transpose) is copied by reshape.
  EXPECT_TRUE(gradientsMatch(
      [](const std::vector<Variable>& in) { return reshape(transpose(in[0], 0, 2), {-1}); }, {x}));
}

TEST(Reshape, is_a_view) {
  Variable x(randomTensor({2, 6}, DType::f32), true);
  Variable y = reshape(x, {3, 4});
  EXPECT_TRUE(y.tensor().sharesStorage(x.tensor()));
  EXPECT_EQ(y.shape(), (Shape{3, 4}));
  EXPECT_THROW(reshape(x, {5, -1}), ValueError);
}

TEST(Flatten, gradient) {
  Tensor x = randomTensor({2, 3, 2, 2}, DType::f64, 2);
  EXPECT_TRUE(gradientsMatch([](const std::vector<Variable>& in) { return flatten(in[0]); }, {x}));
  EXPECT_TRUE(gradientsMatch([](const std::vector<Variable>& in) { return flatten(in[0], 0, 1); }, {x}));
  Variable v(x);
  EXPECT_EQ(flatten(v).shape(), (Shape{2, 12}));
  EXPECT_EQ(flatten(v, 1, 2).shape(), (Shape{2, 6, 2}));
}

TEST(Transpose, gradient) {
  Tensor x = randomTensor({2, 3, 4}, DType::f64, 3);
  EXPECT_TRUE(gradientsMatch([](const std::vector<Variable>& in) { return transpose(in[0], 0, 2); }, {x}));
  EXPECT_TRUE(gradientsMatch([](const std::vector<Variable>& in) { return transpose(in[0], -1, 1); }, {x}));
  Variable v(x);
  Variable t = transpose(v, 0, 1);
  EXPECT_TRUE(t.tensor().sharesStorage(x));
  EXPECT_EQ(t.shape(), (Shape{3, 2, 4}));
}

TEST(Permute, gradient) {
  Tensor x = randomTensor({2, 3, 4}, DType::f64, 4);
  EXPECT_TRUE(gradientsMatch([](const std::vector<Variable>& in) { return permute(in[0], {2, 0, 1}); }, {x}));
  EXPECT_TRUE(gradientsMatch(
      [](const std::vector<Variable>& in) {
        return permute(in[0], {1, -1, 0});
      },
      {x}));
  Variable v(x);
  EXPECT_THROW(permute(v, {0, 0, 1}), ValueError);
  EXPECT_THROW(permute(v, {0, 1}), ValueError);
}

TEST(Narrow, gradient) {
  Tensor x = randomTensor({4, 5}, DType::f64, 5);
  EXPECT_TRUE(gradientsMatch([](const std::vector<Variable>& in) { return narrow(in[0], 1, 1, 3); }, {x}));
  EXPECT_TRUE(gradientsMatch([](const std::vector<Variable>& in) { return narrow(in[0], -2, 3, 1); }, {x}));
  Variable v(x, true);
  Variable n = narrow(v, 0, 1, 2);
  EXPECT_TRUE(n.tensor().sharesStorage(x) || n.tensor().sharesStorage(v.tensor()));
  sum(n).backward();
  EXPECT_EQ(v.grad().toVector<double>()[0], 0.0);
  EXPECT_EQ(v.grad().toVector<double>()[5], 1.0);
  EXPECT_THROW(narrow(v, 0, 3, 2), ValueError);
}

TEST(Concat, gradient) {
  Tensor a = randomTensor({2, 3}, DType::f64, 6), b = randomTensor({2, 1}, DType::f64, 7),
         c = randomTensor({2, 2}, DType::f64, 8);
  EXPECT_TRUE(gradientsMatch(
      [](const std::vector<Variable>& in) {
        return concat({in[0], in[1], in[2]}, 1);
      },
      {a, b, c}));
  EXPECT_TRUE(gradientsMatch(
      [](const std::vector<Variable>& in) {
        return concat({transpose(in[0], 0, 1), in[1]}, 0);
      },
      {a, randomTensor({1, 2}, DType::f64, 9)}));
  // An input that needs no gradient gets none, the others still do.
  EXPECT_TRUE(gradientsMatch(
      [](const std::vector<Variable>& in) {
        return concat({in[0], in[1]}, -1);
      },
      {a, c}, 1e-6, 1e-6, 1e-5, /*no_grad=*/{0}));
}

TEST(Concat, same_variable_twice_gradient) {
  Variable x(Tensor::fromVector<double>({1.0, 2.0}, {2}), true);
  Variable y = concat({x, x * 3.0}, 0);
  y.backward(Tensor::fromVector<double>({1.0, 2.0, 3.0, 4.0}, {4}));
  EXPECT_TRUE(tensorsNear(x.grad(), Tensor::fromVector<double>({10.0, 14.0}, {2}), 1e-12));
}

TEST(Concat, rejects_mismatched_shapes) {
  Variable a(Tensor::zeros({2, 3}, DType::f64), true), b(Tensor::zeros({3, 4}, DType::f64), true);
  try {
    concat({a, b}, 0);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("concat"), std::string::npos) << m;
    EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
    EXPECT_NE(m.find("[3, 4]"), std::string::npos) << m;
  }
  EXPECT_THROW(concat({}, 0), ValueError);
}
