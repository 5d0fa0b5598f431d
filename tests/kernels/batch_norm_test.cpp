#include "lockstep/kernels/tables/batch_norm.h"

#include "common/check.h"
#include "lockstep/kernels.h"

using namespace lockstep;
using kernels::BatchNormParams;
using lockstep::testing::randomTensor;
using lockstep::testing::tensorsNear;

namespace {
struct BnCase {
  Shape x;
  bool affine;
  bool channels_last;
};
const std::vector<BnCase> kCases = {
    {{8, 16, 5, 5}, true, true}, {{1, 3, 7, 5}, true, false}, {{3, 4, 2, 3}, false, true}};

Tensor layout(const Tensor& t, bool channels_last) {
  return channels_last ? t.toFormat(MemoryFormat::channels_last) : t;
}
}  // namespace

TEST(BatchNorm2d, training_matches_reference_and_updates_running_stats) {
  uint64_t seed = 1;
  for (const auto& c : kCases) {
    const int64_t C = c.x[1];
    Tensor x = layout(randomTensor(c.x, DType::f32, seed++, -2, 3), c.channels_last);
    Tensor w = c.affine ? randomTensor({C}, DType::f32, seed++) : Tensor();
    Tensor b = c.affine ? randomTensor({C}, DType::f32, seed++) : Tensor();
    Tensor rm = randomTensor({C}, DType::f32, seed++), rv = randomTensor({C}, DType::f32, seed++, 0.5, 1.5);
    Tensor rm0 = rm.clone(), rv0 = rv.clone();
    BatchNormParams p{true, 0.3, 1e-5};
    auto fast = kernels::batchNorm2dForward(x, w, b, rm, rv, p);
    auto ref = kernels::reference::kBatchNorm.batchNorm2dForward(x, w, b, Tensor(), Tensor(), Tensor(), p);
    EXPECT_TRUE(tensorsNear(fast.y, ref.y, 1e-4, 1e-4)) << shapeToString(c.x);
    EXPECT_EQ(fast.y.isChannelsLast(), x.isChannelsLast());
    EXPECT_TRUE(tensorsNear(fast.mean, ref.mean, 1e-5, 1e-5));
    EXPECT_TRUE(tensorsNear(fast.var, ref.var, 1e-5, 1e-5));
    // PyTorch's update: momentum blend with the unbiased batch variance.
    const double n = double(c.x[0] * c.x[2] * c.x[3]);
    auto m = ref.mean.toVector<double>(), v = ref.var.toVector<double>();
    auto m0 = rm0.toVector<double>(), v0 = rv0.toVector<double>();
    auto m1 = rm.toVector<double>(), v1 = rv.toVector<double>();
    for (int64_t i = 0; i < C; ++i) {
      EXPECT_NEAR(m1[i], 0.7 * m0[i] + 0.3 * m[i], 1e-5);
      EXPECT_NEAR(v1[i], 0.7 * v0[i] + 0.3 * v[i] * n / (n - 1), 1e-5);
    }
    Tensor gy = layout(randomTensor(c.x, DType::f32, seed++), c.channels_last);
    auto gf = kernels::batchNorm2dBackward(gy, x, w, c.affine, fast.mean, fast.var, p);
    auto gr = kernels::reference::kBatchNorm.batchNorm2dBackward(gy, x, w, c.affine, ref.mean, ref.var,
                                                                 Tensor(), false, p);
    EXPECT_TRUE(tensorsNear(gf.x, gr.x, 1e-4, 1e-3)) << shapeToString(c.x);
    EXPECT_EQ(gf.x.isChannelsLast(), x.isChannelsLast());
    EXPECT_EQ(gf.weight.defined(), c.affine);
    if (c.affine) {
      EXPECT_TRUE(tensorsNear(gf.weight, gr.weight, 1e-4, 1e-4));
      EXPECT_TRUE(tensorsNear(gf.bias, gr.bias, 1e-4, 1e-4));
    }
  }
}

TEST(BatchNorm2d, eval_uses_running_stats) {
  uint64_t seed = 30;
  for (const auto& c : kCases) {
    const int64_t C = c.x[1];
    Tensor x = layout(randomTensor(c.x, DType::f32, seed++), c.channels_last);
    Tensor w = c.affine ? randomTensor({C}, DType::f32, seed++) : Tensor();
    Tensor b = c.affine ? randomTensor({C}, DType::f32, seed++) : Tensor();
    Tensor rm = randomTensor({C}, DType::f32, seed++), rv = randomTensor({C}, DType::f32, seed++, 0.5, 1.5);
    Tensor rm0 = rm.clone();
    BatchNormParams p{false, 0.1, 1e-3};
    auto fast = kernels::batchNorm2dForward(x, w, b, rm, rv, p);
    auto ref = kernels::reference::kBatchNorm.batchNorm2dForward(x, w, b, rm, rv, Tensor(), p);
    EXPECT_TRUE(tensorsNear(fast.y, ref.y, 1e-5, 1e-5));
    EXPECT_TRUE(tensorsNear(rm, rm0, 0.0));  // untouched
    Tensor gy = layout(randomTensor(c.x, DType::f32, seed++), c.channels_last);
    auto gf = kernels::batchNorm2dBackward(gy, x, w, c.affine, fast.mean, fast.var, p);
    auto gr = kernels::reference::kBatchNorm.batchNorm2dBackward(gy, x, w, c.affine, ref.mean, ref.var,
                                                                 Tensor(), false, p);
    EXPECT_TRUE(tensorsNear(gf.x, gr.x, 1e-5, 1e-4));
    if (c.affine) {
      EXPECT_TRUE(tensorsNear(gf.weight, gr.weight, 1e-4, 1e-4));
      EXPECT_TRUE(tensorsNear(gf.bias, gr.bias, 1e-4, 1e-4));
    }
  }
}

TEST(BatchNorm2d, rejects_mismatched_shapes) {
  Tensor x = Tensor::zeros({2, 3, 4, 4});
  EXPECT_THROW(kernels::batchNorm2dForward(x, Tensor::ones({4}), Tensor(), Tensor(), Tensor(), {}),
               ValueError);
  EXPECT_THROW(kernels::batchNorm2dForward(x, Tensor(), Tensor(), Tensor::zeros({2}), Tensor::ones({2}), {}),
               ValueError);
  EXPECT_THROW(
      kernels::batchNorm2dForward(Tensor::zeros({2, 3, 4}), Tensor(), Tensor(), Tensor(), Tensor(), {}),
      ValueError);
  // Eval without running statistics, and training on one value per channel.
  EXPECT_THROW(kernels::batchNorm2dForward(x, Tensor(), Tensor(), Tensor(), Tensor(), {false, 0.1, 1e-5}),
               ValueError);
  EXPECT_THROW(
      kernels::batchNorm2dForward(Tensor::zeros({1, 3, 1, 1}), Tensor(), Tensor(), Tensor(), Tensor(), {}),
      ValueError);
  try {
    kernels::batchNorm2dForward(x, Tensor::ones({4}), Tensor(), Tensor(), Tensor(), {});
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 3, 4, 4]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[4]"), std::string::npos) << e.what();
  }
}

TEST(BatchNorm2d, weight_or_bias_alone_matches_reference) {
  Tensor x = randomTensor({4, 3, 3, 2}, DType::f32, 70).toFormat(MemoryFormat::channels_last);
  Tensor v = randomTensor({3}, DType::f32, 71), gy = randomTensor({4, 3, 3, 2}, DType::f32, 72);
  for (bool weight_only : {true, false}) {
    Tensor w = weight_only ? v : Tensor(), b = weight_only ? Tensor() : v;
    BatchNormParams p;
    auto fast = kernels::batchNorm2dForward(x, w, b, Tensor(), Tensor(), p);
    auto ref = kernels::reference::kBatchNorm.batchNorm2dForward(x, w, b, Tensor(), Tensor(), Tensor(), p);
    EXPECT_TRUE(tensorsNear(fast.y, ref.y, 1e-4, 1e-4));
    auto gf = kernels::batchNorm2dBackward(gy, x, w, b.defined(), fast.mean, fast.var, p);
    auto gr = kernels::reference::kBatchNorm.batchNorm2dBackward(gy, x, w, b.defined(), ref.mean, ref.var,
                                                                 Tensor(), false, p);
    EXPECT_TRUE(tensorsNear(gf.x, gr.x, 1e-4, 1e-3));
    EXPECT_EQ(gf.weight.defined(), weight_only);
    EXPECT_EQ(gf.bias.defined(), !weight_only);
    if (weight_only) {
      EXPECT_TRUE(tensorsNear(gf.weight, gr.weight, 1e-4, 1e-4));
    } else {
      EXPECT_TRUE(tensorsNear(gf.bias, gr.bias, 1e-4, 1e-4));
    }
  }
}

// Autocast's batch norm: a bf16/f16 x with f32 parameters and running statistics normalises the
// widened x and rounds y once; the parameters' gradients come in f32, the input's in x's dtype.
TEST(BatchNorm2d, low_precision_input_with_f32_parameters) {
  for (DType low : {DType::bf16, DType::f16}) {
    Tensor x = randomTensor({4, 8, 3, 3}, DType::f32, 80).to(low).toFormat(MemoryFormat::channels_last);
    Tensor w = randomTensor({8}, DType::f32, 81), b = randomTensor({8}, DType::f32, 82);
    Tensor gy = randomTensor({4, 8, 3, 3}, DType::f32, 83).to(low);
    Tensor rm = Tensor::zeros({8}), rv = Tensor::ones({8}), rm32 = rm.clone(), rv32 = rv.clone();
    BatchNormParams p;
    auto got = kernels::batchNorm2dForward(x, w, b, rm, rv, p);
    auto want = kernels::batchNorm2dForward(x.to(DType::f32), w, b, rm32, rv32, p);
    EXPECT_EQ(got.y.dtype(), low);
    EXPECT_TRUE(got.y.isChannelsLast());
    EXPECT_EQ(got.y.to(DType::f32).toVector<float>(), want.y.to(low).to(DType::f32).toVector<float>());
    EXPECT_EQ(rm.toVector<float>(), rm32.toVector<float>());
    EXPECT_EQ(rv.toVector<float>(), rv32.toVector<float>());
    auto g = kernels::batchNorm2dBackward(gy, x, w, true, got.mean, got.var, p);
    auto g32 =
        kernels::batchNorm2dBackward(gy.to(DType::f32), x.to(DType::f32), w, true, want.mean, want.var, p);
    EXPECT_EQ(g.x.dtype(), low);
    EXPECT_EQ(g.weight.dtype(), DType::f32);
    EXPECT_EQ(g.bias.dtype(), DType::f32);
    EXPECT_EQ(g.weight.toVector<float>(), g32.weight.toVector<float>());
    EXPECT_EQ(g.x.to(DType::f32).toVector<float>(), g32.x.to(low).to(DType::f32).toVector<float>());
  }
  Tensor x = randomTensor({2, 3, 2, 2}, DType::f32, 84);
  EXPECT_THROW(
      kernels::batchNorm2dForward(x, Tensor::ones({3}, DType::bf16), Tensor(), Tensor(), Tensor(), {}),
      ValueError);
  EXPECT_THROW(kernels::batchNorm2dForward(x.to(DType::bf16), Tensor::ones({3}),
                                           Tensor::ones({3}, DType::bf16), Tensor(), Tensor(), {}),
               ValueError);
}
