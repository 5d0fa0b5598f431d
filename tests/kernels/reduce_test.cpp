#include "lockstep/kernels/tables/reduce.h"

#include <cmath>

#include "common/check.h"
#include "lockstep/kernels.h"

using namespace lockstep;
using kernels::ReduceOp;
using lockstep::testing::randomTensor;
using lockstep::testing::tensorsNear;

TEST(Reduce, sum_and_mean_match_reference) {
  struct Case {
    Shape shape;
    std::vector<int64_t> dims;
  };
  const std::vector<Case> cases = {
      {{7}, {0}},          {{3, 5}, {0}},    {{3, 5}, {1}}, {{3, 5}, {0, 1}},          {{3, 5}, {-1}},
      {{2, 3, 5}, {0, 2}}, {{2, 3, 5}, {1}}, {{1, 9}, {0}}, {{2, 3, 5, 7}, {0, 2, 3}}, {{4, 1, 3}, {1}},
      {{3, 5}, {}},        {{}, {}},         {{}, {0}},     {{257, 33}, {0}},          {{33, 257}, {1}},
  };
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean}) {
    for (const auto& c : cases) {
      for (bool keepdim : {false, true}) {
        SCOPED_TRACE(shapeToString(c.shape) + " dims " + shapeToString(c.dims) + (keepdim ? " keepdim" : ""));
        Tensor x = randomTensor(c.shape, DType::f32, 7);
        Tensor fast = kernels::onednn::kReduce.reduce(op, x, c.dims, keepdim);
        Tensor ref = kernels::reference::kReduce.reduce(op, x, c.dims, keepdim);
        EXPECT_TRUE(tensorsNear(fast, ref, 1e-5, 1e-5));
      }
    }
  }
}

TEST(Reduce, all_dims_give_0d) {
  Tensor x = randomTensor({3, 4, 5}, DType::f32);
  Tensor s = kernels::reduce(ReduceOp::sum, x, kernels::allDims(x));
  EXPECT_EQ(s.dim(), 0);
  EXPECT_NEAR(s.itemDouble(),
              kernels::reference::kReduce.reduce(ReduceOp::sum, x, {0, 1, 2}, false).itemDouble(), 1e-5);
  Tensor m = kernels::reduce(ReduceOp::mean, x, {0, 1, 2}, /*keepdim=*/true);
  EXPECT_EQ(m.shape(), (Shape{1, 1, 1}));
  EXPECT_NEAR(m.itemDouble(), s.itemDouble() / 60.0, 1e-6);
}

TEST(Reduce, strided_input) {
  Tensor x = randomTensor({5, 6, 7}, DType::f32).permute({2, 0, 1});
  Tensor n = randomTensor({6, 9}, DType::f32).narrow(1, 1, 5);
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean}) {
    EXPECT_TRUE(tensorsNear(kernels::reduce(op, x, {0, 2}),
                            kernels::reference::kReduce.reduce(op, x, {0, 2}, false), 1e-5, 1e-5));
    EXPECT_TRUE(tensorsNear(kernels::reduce(op, n, {1}),
                            kernels::reference::kReduce.reduce(op, n, {1}, false), 1e-5, 1e-5));
  }
}

TEST(Reduce, empty_input) {
  Tensor x = Tensor::zeros({0, 3});
  EXPECT_TRUE(tensorsNear(kernels::reduce(ReduceOp::sum, x, {0}), Tensor::zeros({3}), 0.0));
  Tensor m = kernels::reduce(ReduceOp::mean, x, {0});
  EXPECT_TRUE(std::isnan(m.toVector<double>()[0]));
}

TEST(Reduce, rejects_bad_dims) {
  Tensor x = Tensor::zeros({2, 3});
  EXPECT_THROW(kernels::reduce(ReduceOp::sum, x, {0, -2}), ValueError);
  EXPECT_THROW(kernels::reduce(ReduceOp::sum, x, {2}), ValueError);
  try {
    kernels::reduce(ReduceOp::mean, x, {1, 1});
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("mean"), std::string::npos) << e.what();
  }
}

TEST(SumToShape, folds_broadcast_dims) {
  Tensor g = randomTensor({4, 3, 5}, DType::f32);
  struct Case {
    Shape target;
    std::vector<int64_t> dims;  // reduced dims of g, kept
  };
  for (const auto& c : std::vector<Case>{{{4, 3, 5}, {}},
                                         {{5}, {0, 1}},
                                         {{3, 1}, {0, 2}},
                                         {{1, 3, 1}, {0, 2}},
                                         {{1}, {0, 1, 2}},
                                         {{}, {0, 1, 2}},
                                         {{4, 1, 5}, {1}}}) {
    SCOPED_TRACE(shapeToString(c.target));
    Tensor r = kernels::sumToShape(g, c.target);
    EXPECT_EQ(r.shape(), c.target);
    Tensor ref = kernels::reference::kReduce.reduce(ReduceOp::sum, g, c.dims, true).reshape(c.target);
    EXPECT_TRUE(tensorsNear(r, ref, 1e-5, 1e-5));
  }
  Tensor g64 = randomTensor({3, 4}, DType::f64);
  EXPECT_TRUE(tensorsNear(kernels::sumToShape(g64, {3, 1}),
                          kernels::reference::kReduce.reduce(ReduceOp::sum, g64, {1}, true), 1e-12));
}

TEST(SumToShape, rejects_non_broadcast_shape) {
  Tensor g = Tensor::zeros({4, 3});
  EXPECT_THROW(kernels::sumToShape(g, {2, 3}), ValueError);
  EXPECT_THROW(kernels::sumToShape(g, {2, 4, 3}), ValueError);
  try {
    kernels::sumToShape(g, {4, 2});
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("[4, 2]"), std::string::npos) << m;
    EXPECT_NE(m.find("[4, 3]"), std::string::npos) << m;
  }
}

TEST(Reduce, integer_sum_stays_exact) {
  Tensor x = Tensor::fromVector<int64_t>({(int64_t{1} << 40) + 1, 2, 3, 4}, {2, 2});
  EXPECT_EQ(kernels::reduce(ReduceOp::sum, x, {0}).toVector<int64_t>(),
            (std::vector<int64_t>{(int64_t{1} << 40) + 4, 6}));
  EXPECT_EQ(kernels::reduce(ReduceOp::sum, x, {0, 1}).toVector<int64_t>(),
            (std::vector<int64_t>{(int64_t{1} << 40) + 10}));
}
