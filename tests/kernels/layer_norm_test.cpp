#include "lockstep/kernels/tables/layer_norm.h"

#include "common/check.h"
#include "lockstep/kernels.h"

using namespace lockstep;
using lockstep::testing::randomTensor;
using lockstep::testing::tensorsNear;

namespace {
void expectMatches(const Tensor& x, const Shape& ns, bool with_weight, bool with_bias) {
  SCOPED_TRACE(shapeToString(x.shape()) + " over " + shapeToString(ns) + (with_weight ? " w" : "") +
               (with_bias ? " b" : ""));
  Tensor w = with_weight ? randomTensor(ns, DType::f32, 31, 0.5, 1.5) : Tensor();
  Tensor b = with_bias ? randomTensor(ns, DType::f32, 32) : Tensor();
  auto fast = kernels::onednn::kLayerNorm.layerNormForward(x, ns, w, b, 1e-5, x.dtype());
  auto ref = kernels::reference::kLayerNorm.layerNormForward(x, ns, w, b, 1e-5, x.dtype());
  EXPECT_TRUE(tensorsNear(fast.y, ref.y, 1e-5, 1e-4));
  EXPECT_TRUE(tensorsNear(fast.mean, ref.mean, 1e-6, 1e-5));
  EXPECT_TRUE(tensorsNear(fast.variance, ref.variance, 1e-6, 1e-4));
  Tensor gy = randomTensor(x.shape(), DType::f32, 33);
  auto gf = kernels::onednn::kLayerNorm.layerNormBackward(gy, x, fast.mean, fast.variance, ns, w, b, 1e-5);
  auto gr = kernels::reference::kLayerNorm.layerNormBackward(gy, x, ref.mean, ref.variance, ns, w, b, 1e-5);
  EXPECT_TRUE(tensorsNear(gf.gx, gr.gx, 1e-4, 1e-4));
  EXPECT_EQ(gf.gweight.defined(), with_weight);
  EXPECT_EQ(gf.gbias.defined(), with_bias);
  if (with_weight) {
    EXPECT_TRUE(tensorsNear(gf.gweight, gr.gweight, 1e-4, 1e-4));
  }
  if (with_bias) {
    EXPECT_TRUE(tensorsNear(gf.gbias, gr.gbias, 1e-4, 1e-4));
  }
}
}  // namespace

TEST(LayerNorm, forward_and_backward_match_reference) {
  for (bool w : {false, true}) {
    for (bool b : {false, true}) {
      expectMatches(randomTensor({4, 7}, DType::f32, 30), {7}, w, b);
    }
  }
  expectMatches(randomTensor({1, 5}, DType::f32, 30), {5}, true, true);
  expectMatches(randomTensor({2, 3, 5}, DType::f32, 30), {3, 5}, true, true);
  expectMatches(randomTensor({3, 2, 33}, DType::f32, 30), {33}, true, false);
  expectMatches(randomTensor({9}, DType::f32, 30), {9}, true, true);
  // Not contiguous: copied once, then the same primitive.
  expectMatches(randomTensor({6, 4}, DType::f32, 30).transpose(0, 1), {6}, true, true);
}

TEST(LayerNorm, dispatch_uses_f64_reference) {
  Tensor x = randomTensor({3, 4}, DType::f64);
  auto out = kernels::layerNormForward(x, {4}, Tensor(), Tensor(), 1e-5);
  EXPECT_EQ(out.y.dtype(), DType::f64);
  auto row = out.y.narrow(0, 0, 1).toVector<double>();
  double m = 0;
  for (double v : row) m += v;
  EXPECT_NEAR(m, 0.0, 1e-12);
}

TEST(LayerNorm, rejects_mismatched_shapes) {
  Tensor x = Tensor::zeros({2, 3, 4});
  try {
    kernels::layerNormForward(x, {3}, Tensor(), Tensor(), 1e-5);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("layer_norm"), std::string::npos) << m;
    EXPECT_NE(m.find("[3]"), std::string::npos) << m;
    EXPECT_NE(m.find("[2, 3, 4]"), std::string::npos) << m;
  }
  EXPECT_THROW(kernels::layerNormForward(x, {4}, Tensor::ones({5}), Tensor(), 1e-5), ValueError);
  EXPECT_THROW(kernels::layerNormForward(x, {4}, Tensor(), Tensor::ones({4}, DType::f64), 1e-5), ValueError);
  EXPECT_THROW(kernels::layerNormForward(x, {}, Tensor(), Tensor(), 1e-5), ValueError);
}

// y_dtype: the f32 normalisation rounded to bf16 / f16 (what a cast of y would give), and a gradient
// in that dtype read as the f32 one it equals.
TEST(LayerNorm, output_in_a_narrower_dtype_is_the_rounded_f32_output) {
  Tensor x = randomTensor({6, 24}, DType::f32, 1, -2, 3), w = randomTensor({24}, DType::f32, 2),
         b = randomTensor({24}, DType::f32, 3);
  auto wide = kernels::layerNormForward(x, {24}, w, b, 1e-5);
  for (DType low : {DType::bf16, DType::f16}) {
    auto narrow = kernels::layerNormForward(x, {24}, w, b, 1e-5, low);
    ASSERT_EQ(narrow.y.dtype(), low);
    EXPECT_TRUE(tensorsNear(narrow.y, wide.y.to(low), 0, 0)) << dtypeName(low);
    EXPECT_TRUE(tensorsNear(narrow.mean, wide.mean, 0, 0));
    Tensor gy = randomTensor({6, 24}, DType::f32, 4).to(low);
    auto g = kernels::layerNormBackward(gy, x, narrow.mean, narrow.variance, {24}, w, b, 1e-5);
    auto want = kernels::layerNormBackward(gy.to(DType::f32), x, wide.mean, wide.variance, {24}, w, b, 1e-5);
    EXPECT_TRUE(tensorsNear(g.gx, want.gx, 0, 0)) << dtypeName(low);
    EXPECT_TRUE(tensorsNear(g.gweight, want.gweight, 0, 0)) << dtypeName(low);
    EXPECT_TRUE(tensorsNear(g.gbias, want.gbias, 0, 0)) << dtypeName(low);
  }
  EXPECT_THROW(kernels::layerNormForward(x, {24}, w, b, 1e-5, DType::i32), ValueError);
}
