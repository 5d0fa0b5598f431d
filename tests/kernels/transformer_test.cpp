#include "lockstep/kernels/transformer.h"

#include "common/check.h"
#include "lockstep/kernels.h"
#include "lockstep/kernels/tables/activation.h"
#include "lockstep/kernels/tables/transformer.h"

using namespace lockstep;
using lockstep::testing::randomTensor;
using lockstep::testing::tensorsNear;

TEST(Embedding, gathers_rows_and_scatter_adds_repeated_indices) {
  Tensor w = randomTensor({5, 3}, DType::f32, 1);
  Tensor ix = Tensor::fromVector<int64_t>({4, 0, 4, 2, 4, 1}, {2, 3});
  Tensor y = kernels::embeddingForward(w, ix);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 3}));
  EXPECT_TRUE(tensorsNear(y, kernels::reference::kTransformer.embeddingForward(w, ix), 0.0));
  Tensor g = randomTensor({2, 3, 3}, DType::f32, 2);
  for (int64_t pad : {-1, 4, 0}) {
    Tensor gw = kernels::embeddingBackward(g, ix, 5, pad);
    EXPECT_TRUE(tensorsNear(gw, kernels::reference::kTransformer.embeddingBackward(g, ix, 5, pad), 1e-6))
        << pad;
    if (pad >= 0) {
      EXPECT_EQ(gw.narrow(0, pad, 1).toVector<float>(), std::vector<float>(3, 0.0f));
    }
  }
  // Row 3 is never indexed: no gradient there either.
  EXPECT_EQ(kernels::embeddingBackward(g, ix, 5, -1).narrow(0, 3, 1).toVector<float>(),
            std::vector<float>(3, 0.0f));
}

TEST(Embedding, out_of_range_index_is_an_index_error_naming_it) {
  Tensor w = Tensor::zeros({10, 4});
  try {
    kernels::embeddingForward(w, Tensor::fromVector<int64_t>({1, 2, 10}, {3}));
    FAIL() << "expected IndexError";
  } catch (const IndexError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("index 10 at position 2"), std::string::npos) << m;
    EXPECT_NE(m.find("10 embeddings"), std::string::npos) << m;
  }
  EXPECT_THROW(kernels::embeddingForward(w, Tensor::fromVector<int64_t>({-1}, {1})), IndexError);
  EXPECT_THROW(kernels::embeddingForward(w, Tensor::zeros({2}, DType::i32)), ValueError);
}

TEST(RmsNorm, forward_and_backward_match_reference) {
  for (const Shape& shape : {Shape{4, 7}, Shape{1, 1, 192}, Shape{3, 1}}) {
    SCOPED_TRACE(shapeToString(shape));
    const int64_t d = shape.back();
    Tensor x = randomTensor(shape, DType::f32, 3, -2.0, 2.0);
    for (bool with_w : {false, true}) {
      Tensor w = with_w ? randomTensor({d}, DType::f32, 4, 0.5, 1.5) : Tensor();
      auto f = kernels::rmsNormForward(x, w, 1e-6);
      auto r = kernels::reference::kTransformer.rmsNormForward(x, w, 1e-6, x.dtype());
      EXPECT_TRUE(tensorsNear(f.y, r.y, 1e-5, 1e-5));
      EXPECT_TRUE(tensorsNear(f.rstd, r.rstd, 1e-5, 1e-5));
      Tensor g = randomTensor(shape, DType::f32, 5);
      auto gf = kernels::rmsNormBackward(g, x, f.rstd, w);
      auto gr = kernels::reference::kTransformer.rmsNormBackward(g, x, r.rstd, w);
      EXPECT_TRUE(tensorsNear(gf.gx, gr.gx, 1e-4, 1e-4));
      EXPECT_EQ(gf.gweight.defined(), with_w);
      if (with_w) {
        EXPECT_TRUE(tensorsNear(gf.gweight, gr.gweight, 1e-4, 1e-4));
      }
    }
  }
}

// y_dtype: the f32 normalisation rounded to bf16 / f16, and a gradient in that dtype read as the
// f32 one it equals (autocast's RMSNorm before its linear layers).
TEST(RmsNorm, output_in_a_narrower_dtype_is_the_rounded_f32_output) {
  Tensor x = randomTensor({5, 32}, DType::f32, 1, -2, 2), w = randomTensor({32}, DType::f32, 2);
  auto wide = kernels::rmsNormForward(x, w, 1e-6);
  for (DType low : {DType::bf16, DType::f16}) {
    auto narrow = kernels::rmsNormForward(x, w, 1e-6, low);
    ASSERT_EQ(narrow.y.dtype(), low);
    EXPECT_TRUE(tensorsNear(narrow.y, wide.y.to(low), 0, 0)) << dtypeName(low);
    EXPECT_TRUE(tensorsNear(narrow.rstd, wide.rstd, 0, 0));
    Tensor gy = randomTensor({5, 32}, DType::f32, 3).to(low);
    auto g = kernels::rmsNormBackward(gy, x, narrow.rstd, w);
    auto want = kernels::rmsNormBackward(gy.to(DType::f32), x, wide.rstd, w);
    EXPECT_TRUE(tensorsNear(g.gx, want.gx, 0, 0)) << dtypeName(low);
    EXPECT_TRUE(tensorsNear(g.gweight, want.gweight, 0, 0)) << dtypeName(low);
  }
  EXPECT_THROW(kernels::rmsNormForward(x, w, 1e-6, DType::i64), ValueError);
}

TEST(Swiglu, forward_and_backward_match_reference) {
  Tensor a = randomTensor({3, 41}, DType::f32, 6, -4.0, 4.0), b = randomTensor({3, 41}, DType::f32, 7);
  EXPECT_TRUE(tensorsNear(kernels::swigluForward(a, b), kernels::reference::kTransformer.swigluForward(a, b),
                          1e-6, 1e-5));
  Tensor g = randomTensor({3, 41}, DType::f32, 8);
  auto [ga, gb] = kernels::swigluBackward(g, a, b);
  auto [ra, rb] = kernels::reference::kTransformer.swigluBackward(g, a, b);
  EXPECT_TRUE(tensorsNear(ga, ra, 1e-6, 1e-5));
  EXPECT_TRUE(tensorsNear(gb, rb, 1e-6, 1e-5));
  EXPECT_THROW(kernels::swigluForward(a, Tensor::zeros({3, 40})), ValueError);
}

TEST(Rotary, forward_and_inverse_match_reference) {
  Tensor x = randomTensor({2, 3, 5, 8}, DType::f32, 9);
  Tensor c = randomTensor({5, 4}, DType::f32, 10), s = randomTensor({5, 4}, DType::f32, 11);
  EXPECT_TRUE(tensorsNear(kernels::rotaryForward(x, c, s),
                          kernels::reference::kTransformer.rotaryForward(x, c, s), 1e-6));
  EXPECT_TRUE(tensorsNear(kernels::rotaryBackward(x, c, s),
                          kernels::reference::kTransformer.rotaryBackward(x, c, s), 1e-6));
  // A strided input (a transposed [B, T, H, D]) gives the same result as its contiguous copy.
  Tensor xt = randomTensor({2, 5, 3, 8}, DType::f32, 12).transpose(1, 2);
  EXPECT_TRUE(
      tensorsNear(kernels::rotaryForward(xt, c, s), kernels::rotaryForward(xt.contiguous(), c, s), 0.0));
  EXPECT_THROW(kernels::rotaryForward(Tensor::zeros({1, 1, 5, 7}), c, s), ValueError);
  EXPECT_THROW(kernels::rotaryForward(x, Tensor::zeros({4, 4}), s), ValueError);
}

TEST(Activation, gelu_tanh_own_loops_match_reference_over_the_whole_range) {
  // f32 GELU (tanh) runs lockstep's own vector loops: check them where tanh saturates, near 0 (where
  // 1 - e cancels), where x^3 overflows f32, in the tail past the vector width, and at +inf and NaN.
  std::vector<float> v;
  for (int i = -40000; i <= 40000; ++i) v.push_back(static_cast<float>(i) * 5e-4f);  // [-20, 20]
  for (float tiny : {1e-30f, -1e-30f, 1e-7f, -3e-6f, 0.0f, -0.0f, 1e30f, -1e30f}) v.push_back(tiny);
  Tensor x = Tensor::fromVector(v, {static_cast<int64_t>(v.size())});
  Tensor g = randomTensor(x.shape(), DType::f32, 21);
  EXPECT_TRUE(tensorsNear(kernels::geluTanhForward(x), kernels::reference::kActivation.geluTanhForward(x),
                          1e-6, 1e-5));
  EXPECT_TRUE(tensorsNear(kernels::geluTanhBackward(g, x),
                          kernels::reference::kActivation.geluTanhBackward(g, x), 1e-6, 1e-4));
  const float inf = std::numeric_limits<float>::infinity();
  auto y = kernels::geluTanhForward(Tensor::fromVector(std::vector<float>{inf, 3.0f}, {2})).toVector<float>();
  EXPECT_EQ(y[0], inf);
  EXPECT_TRUE(std::isnan(
      kernels::geluTanhForward(Tensor::fromVector(std::vector<float>{NAN}, {1})).toVector<float>()[0]));
}

TEST(Activation, gelu_tanh_and_silu_match_reference) {
  Tensor x = randomTensor({5, 13}, DType::f32, 13, -5.0, 5.0), g = randomTensor({5, 13}, DType::f32, 14);
  EXPECT_TRUE(tensorsNear(kernels::geluTanhForward(x), kernels::reference::kActivation.geluTanhForward(x),
                          1e-5, 1e-5));
  EXPECT_TRUE(tensorsNear(kernels::geluTanhBackward(g, x),
                          kernels::reference::kActivation.geluTanhBackward(g, x), 1e-5, 1e-4));
  EXPECT_TRUE(
      tensorsNear(kernels::siluForward(x), kernels::reference::kActivation.siluForward(x), 1e-5, 1e-5));
  EXPECT_TRUE(tensorsNear(kernels::siluBackward(g, x), kernels::reference::kActivation.siluBackward(g, x),
                          1e-5, 1e-4));
}
