#include "common/check.h"
#include "lockstep/autograd.h"

using namespace lockstep;
using namespace lockstep::autograd;
using lockstep::testing::gradientsMatch;
using lockstep::testing::randomTensor;
using lockstep::testing::tensorsNear;

TEST(Sum, gradient) {
  Tensor x = randomTensor({3, 4}, DType::f64, 1);
  EXPECT_TRUE(gradientsMatch([](const std::vector<Variable>& in) { return sum(in[0]); }, {x}));
  for (bool keepdim : {false, true}) {
    for (const std::vector<int64_t>& dims : std::vector<std::vector<int64_t>>{{0}, {1}, {-1}, {0, 1}, {}}) {
      EXPECT_TRUE(
          gradientsMatch([&](const std::vector<Variable>& in) { return sum(in[0], dims, keepdim); }, {x}))
          << shapeToString(dims) << keepdim;
    }
  }
  Tensor y = randomTensor({2, 3, 5}, DType::f64, 2);
  EXPECT_TRUE(gradientsMatch([](const std::vector<Variable>& in) { return sum(in[0], {0, 2}, true); }, {y}));
  EXPECT_TRUE(gradientsMatch([](const std::vector<Variable>& in) { return sum(in[0], {2, 0}); }, {y}));
}

TEST(Mean, gradient) {
  Tensor x = randomTensor({2, 3, 5}, DType::f64, 3);
  EXPECT_TRUE(gradientsMatch([](const std::vector<Variable>& in) { return mean(in[0]); }, {x}));
  for (bool keepdim : {false, true}) {
    for (const std::vector<int64_t>& dims : std::vector<std::vector<int64_t>>{{0}, {1}, {-1, 0}}) {
      EXPECT_TRUE(
          gradientsMatch([&](const std::vector<Variable>& in) { return mean(in[0], dims, keepdim); }, {x}))
          << shapeToString(dims) << keepdim;
    }
  }
}

TEST(Sum, zero_dim_result_backward) {
  Variable x(randomTensor({2, 3}, DType::f64), true);
  Variable s = sum(x);
  EXPECT_EQ(s.dim(), 0);
  s.backward();
  EXPECT_TRUE(tensorsNear(x.grad(), Tensor::ones({2, 3}, DType::f64), 0.0));
  Variable m = mean(x);
  EXPECT_EQ(m.dim(), 0);
  x.zeroGrad();
  m.backward();
  EXPECT_TRUE(tensorsNear(x.grad(), Tensor::full({2, 3}, 1.0 / 6.0, DType::f64), 1e-15));
}

TEST(Sum, of_0d_input) {
  Variable x(Tensor::scalar(2.5, DType::f64), true);
  Variable s = sum(x);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_DOUBLE_EQ(s.item(), 2.5);
  s.backward();
  EXPECT_DOUBLE_EQ(x.grad().itemDouble(), 1.0);
}

TEST(Sum, f32_values_and_gradient) {
  Variable x(randomTensor({17, 33}, DType::f32, 4), true);
  Variable s = mean(sum(x, {0}) * 2.0);
  double expect = 0;
  for (double v : x.tensor().toVector<double>()) expect += v;
  EXPECT_NEAR(s.item(), 2.0 * expect / 33.0, 1e-4);
  s.backward();
  EXPECT_TRUE(tensorsNear(x.grad(), Tensor::full({17, 33}, 2.0 / 33.0, DType::f32), 1e-7));
}

TEST(Sum, rejects_bad_dims) {
  Variable x(Tensor::zeros({2, 3}, DType::f64), true);
  EXPECT_THROW(sum(x, {2}), ValueError);
  EXPECT_THROW(sum(x, {1, -1}), ValueError);
  EXPECT_THROW(mean(x, {-3}), ValueError);
}
