#include "lockstep/kernels/tables/shape.h"

#include "common/check.h"
#include "lockstep/kernels.h"

using namespace lockstep;
using lockstep::testing::randomTensor;
using lockstep::testing::tensorsNear;

TEST(Concat, forward_matches_reference) {
  struct Case {
    std::vector<Shape> shapes;
    int64_t dim;
  };
  const std::vector<Case> cases = {
      {{{3}, {5}}, 0},
      {{{2, 3}, {4, 3}, {1, 3}}, 0},
      {{{3, 2}, {3, 5}}, 1},
      {{{3, 2}, {3, 5}}, -1},
      {{{2, 3, 4}, {2, 1, 4}, {2, 7, 4}}, 1},
      {{{1, 3, 5}, {1, 3, 2}}, 2},
      {{{2, 3}, {0, 3}, {1, 3}}, 0},  // an empty piece
      {{{4, 5}}, 1},                  // a single input
  };
  for (const auto& c : cases) {
    std::vector<Tensor> xs;
    for (size_t i = 0; i < c.shapes.size(); ++i) xs.push_back(randomTensor(c.shapes[i], DType::f32, 20 + i));
    Tensor fast = kernels::onednn::kShape.concat(xs, c.dim);
    Tensor ref = kernels::reference::kShape.concat(xs, c.dim);
    EXPECT_TRUE(tensorsNear(fast, ref, 0.0)) << "dim " << c.dim;
    EXPECT_TRUE(fast.isContiguous());
  }
}

TEST(Concat, strided_inputs_and_other_dtypes) {
  Tensor a = randomTensor({5, 3}, DType::f32, 1).transpose(0, 1);  // [3, 5]
  Tensor b = randomTensor({3, 9}, DType::f32, 2).narrow(1, 2, 4);  // [3, 4] with gaps
  Tensor c = randomTensor({2, 3, 4, 5}, DType::f32, 3).toFormat(MemoryFormat::channels_last);
  Tensor d = randomTensor({2, 3, 4, 5}, DType::f32, 4);
  EXPECT_TRUE(tensorsNear(kernels::concat({a, b}, 1), kernels::reference::kShape.concat({a, b}, 1), 0.0));
  EXPECT_TRUE(tensorsNear(kernels::concat({c, d}, 1), kernels::reference::kShape.concat({c, d}, 1), 0.0));
  Tensor i = Tensor::arange(4), j = Tensor::arange(3);
  EXPECT_EQ(kernels::concat({i, j}, 0).toVector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2}));
  Tensor e = randomTensor({2, 2}, DType::f64), f = randomTensor({2, 1}, DType::f64, 2);
  EXPECT_TRUE(tensorsNear(kernels::concat({e, f}, 1), kernels::reference::kShape.concat({e, f}, 1), 0.0));
}

TEST(Concat, rejects_mismatched_shapes) {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({2, 4});
  try {
    kernels::concat({a, b}, 0);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("concat"), std::string::npos) << m;
    EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
    EXPECT_NE(m.find("[2, 4]"), std::string::npos) << m;
  }
  EXPECT_NO_THROW(kernels::concat({a, b}, 1));
  EXPECT_THROW(kernels::concat({a, Tensor::zeros({2, 3, 1})}, 0), ValueError);
  EXPECT_THROW(kernels::concat({a, b}, 2), ValueError);
  EXPECT_THROW(kernels::concat({}, 0), ValueError);
  try {
    kernels::concat({a, Tensor::zeros({2, 3}, DType::f64)}, 0);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("f32"), std::string::npos) << m;
    EXPECT_NE(m.find("f64"), std::string::npos) << m;
  }
}
