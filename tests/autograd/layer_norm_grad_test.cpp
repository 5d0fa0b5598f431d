#include "common/check.h"
#include "lockstep/autograd.h"

using namespace lockstep;
using namespace lockstep::autograd;
using lockstep::testing::gradientsMatch;
using lockstep::testing::randomTensor;
using lockstep::testing::tensorsNear;

TEST(LayerNorm, gradient) {
  Tensor x = randomTensor({3, 5}, DType::f64, 1, -2.0, 2.0);
  Tensor w = randomTensor({5}, DType::f64, 2, 0.5, 1.5), b = randomTensor({5}, DType::f64, 3);
  EXPECT_TRUE(gradientsMatch(
      [](const std::vector<Variable>& in) { return layerNorm(in[0], {5}, in[1], in[2]); }, {x, w, b}));
  EXPECT_TRUE(gradientsMatch(
      [](const std::vector<Variable>& in) { return layerNorm(in[0], {5}, Variable(), Variable()); }, {x}));
  EXPECT_TRUE(gradientsMatch(
      [](const std::vector<Variable>& in) { return layerNorm(in[0], {5}, in[1], Variable()); }, {x, w}));
}

TEST(LayerNorm, multi_dim_gradient) {
  Tensor x = randomTensor({2, 2, 3}, DType::f64, 4, -2.0, 2.0);
  Tensor w = randomTensor({2, 3}, DType::f64, 5, 0.5, 1.5), b = randomTensor({2, 3}, DType::f64, 6);
  EXPECT_TRUE(gradientsMatch(
      [](const std::vector<Variable>& in) {
        return layerNorm(in[0], {2, 3}, in[1], in[2], 1e-3);
      },
      {x, w, b}));
  // Strided input: normalised over a transposed view.
  EXPECT_TRUE(gradientsMatch(
      [](const std::vector<Variable>& in) {
        return layerNorm(transpose(in[0], 0, 1), {3}, Variable(), in[1]);
      },
      {randomTensor({3, 4}, DType::f64, 7, -2.0, 2.0), randomTensor({3}, DType::f64, 8)}));
}

TEST(LayerNorm, forward_matches_reference) {
  // f32 through oneDNN against the f64 reference, values and gradients.
  Tensor x = randomTensor({4, 6, 8}, DType::f64, 9, -2.0, 2.0);
  Tensor w = randomTensor({8}, DType::f64, 10, 0.5, 1.5), b = randomTensor({8}, DType::f64, 11);
  auto run = [&](DType dt) {
    Variable vx(x.to(dt), true), vw(w.to(dt), true), vb(b.to(dt), true);
    Variable y = layerNorm(vx, {8}, vw, vb);
    sum(y * y).backward();
    return std::vector<Tensor>{y.tensor(), vx.grad(), vw.grad(), vb.grad()};
  };
  auto r32 = run(DType::f32), r64 = run(DType::f64);
  for (size_t i = 0; i < r32.size(); ++i) EXPECT_TRUE(tensorsNear(r32[i], r64[i], 1e-3, 1e-3)) << i;
}

TEST(LayerNorm, rejects_mismatched_shapes) {
  Variable x(Tensor::zeros({2, 3, 4}, DType::f64), true);
  try {
    layerNorm(x, {3, 5}, Variable(), Variable());
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("layer_norm"), std::string::npos) << m;
    EXPECT_NE(m.find("[3, 5]"), std::string::npos) << m;
    EXPECT_NE(m.find("[2, 3, 4]"), std::string::npos) << m;
  }
  Variable w(Tensor::ones({3}, DType::f64), true);
  EXPECT_THROW(layerNorm(x, {4}, w, Variable()), ValueError);
  Variable w32(Tensor::ones({4}, DType::f32), true);
  EXPECT_THROW(layerNorm(x, {4}, w32, Variable()), ValueError);
}
