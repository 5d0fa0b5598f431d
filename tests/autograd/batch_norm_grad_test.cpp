#include "common/check.h"
#include "lockstep/kernels.h"
#include "lockstep/kernels/tables/batch_norm.h"

using namespace lockstep;
using namespace lockstep::autograd;
using lockstep::testing::gradientsMatch;
using lockstep::testing::randomTensor;

TEST(BatchNorm2d, gradient) {
  BatchNormOptions o;  // training: the batch statistics depend on x
  EXPECT_TRUE(gradientsMatch(
      [&](const std::vector<Variable>& in) {
        return batchNorm2d(in[0], in[1], in[2], Tensor(), Tensor(), o);
      },
      {randomTensor({3, 2, 2, 3}, DType::f64, 1), randomTensor({2}, DType::f64, 2),
       randomTensor({2}, DType::f64, 3)},
      1e-6, 1e-5, 1e-4));
}

TEST(BatchNorm2d, gradient_without_affine) {
  BatchNormOptions o;
  EXPECT_TRUE(gradientsMatch(
      [&](const std::vector<Variable>& in) {
        return batchNorm2d(in[0], Variable(), Variable(), Tensor(), Tensor(), o);
      },
      {randomTensor({2, 3, 2, 2}, DType::f64, 4)}, 1e-6, 1e-5, 1e-4));
}

TEST(BatchNorm2d, gradient_in_eval_mode) {
  BatchNormOptions o;
  o.training = false;
  Tensor rm = randomTensor({2}, DType::f64, 5), rv = randomTensor({2}, DType::f64, 6, 0.5, 1.5);
  EXPECT_TRUE(gradientsMatch(
      [&](const std::vector<Variable>& in) { return batchNorm2d(in[0], in[1], in[2], rm, rv, o); },
      {randomTensor({2, 2, 3, 2}, DType::f64, 7), randomTensor({2}, DType::f64, 8),
       randomTensor({2}, DType::f64, 9)}));
}

TEST(BatchNorm2d, forward_matches_reference) {
  Tensor x = randomTensor({4, 3, 5, 5}, DType::f32, 10).toFormat(MemoryFormat::channels_last);
  Tensor w = randomTensor({3}, DType::f32, 11), b = randomTensor({3}, DType::f32, 12);
  Tensor rm = Tensor::zeros({3}), rv = Tensor::ones({3});
  Variable y = batchNorm2d(Variable(x, true), Variable(w, true), Variable(b, true), rm, rv, {});
  EXPECT_TRUE(y.tensor().isChannelsLast());
  auto ref = kernels::reference::kBatchNorm.batchNorm2dForward(x, w, b, Tensor(), Tensor(), Tensor(), {});
  EXPECT_TRUE(lockstep::testing::tensorsNear(y.tensor(), ref.y, 1e-4, 1e-4));
  // running stats updated in place: 0.9 * 0 + 0.1 * mean, 0.9 * 1 + 0.1 * unbiased var.
  auto m = ref.mean.toVector<double>(), v = ref.var.toVector<double>();
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(rm.toVector<double>()[i], 0.1 * m[i], 1e-6);
    EXPECT_NEAR(rv.toVector<double>()[i], 0.9 + 0.1 * v[i] * 100.0 / 99.0, 1e-6);
  }
}

TEST(BatchNorm2d, rejects_mismatched_shapes) {
  Variable x(Tensor::zeros({2, 3, 4, 4}));
  EXPECT_THROW(batchNorm2d(x, Variable(Tensor::ones({2})), Variable(), Tensor(), Tensor(), {}), ValueError);
  EXPECT_THROW(batchNorm2d(x, Variable(), Variable(), Tensor::zeros({3}), Tensor(), {}), ValueError);
}

// relu(batchNorm2d(x) + residual): the gradients of x, the parameters and the residual (x shifted
// so that the relu cuts a good part of the outputs; no output sits at the kink).
TEST(BatchNorm2d, relu_with_residual_gradient) {
  BatchNormOptions o;
  EXPECT_TRUE(gradientsMatch(
      [&](const std::vector<Variable>& in) {
        return batchNorm2dRelu(in[0], in[1], in[2], Tensor(), Tensor(), o, in[3]);
      },
      {randomTensor({3, 2, 2, 3}, DType::f64, 21), randomTensor({2}, DType::f64, 22),
       randomTensor({2}, DType::f64, 23), randomTensor({3, 2, 2, 3}, DType::f64, 24)},
      1e-6, 1e-5, 1e-4));
}

// The fused op gives the composed ops' values and gradients, with and without a residual, and falls
// back to them where the residual is not x's shape (a broadcast).
TEST(BatchNorm2d, relu_fused_equals_the_ops_composed) {
  Tensor x = randomTensor({4, 3, 3, 2}, DType::f32, 30).toFormat(MemoryFormat::channels_last);
  Tensor w = randomTensor({3}, DType::f32, 31), b = randomTensor({3}, DType::f32, 32);
  for (const Tensor& res :
       {Tensor(), randomTensor({4, 3, 3, 2}, DType::f32, 33), randomTensor({3, 1, 1}, DType::f32, 34)}) {
    std::vector<std::vector<float>> grads[2];
    for (int fused = 0; fused < 2; ++fused) {
      Variable xv(x, true), wv(w, true), bv(b, true), rv = res.defined() ? Variable(res, true) : Variable();
      Variable y = fused ? batchNorm2dRelu(xv, wv, bv, Tensor(), Tensor(), {}, rv)
                         : relu(rv.defined() ? add(batchNorm2d(xv, wv, bv, Tensor(), Tensor(), {}), rv)
                                             : batchNorm2d(xv, wv, bv, Tensor(), Tensor(), {}));
      sum(mul(y, Variable(randomTensor(y.shape(), DType::f32, 35)))).backward();
      grads[fused] = {y.tensor().contiguous().toVector<float>(), xv.grad().contiguous().toVector<float>(),
                      wv.grad().toVector<float>(), bv.grad().toVector<float>()};
      if (rv.defined()) grads[fused].push_back(rv.grad().contiguous().toVector<float>());
    }
    ASSERT_EQ(grads[0].size(), grads[1].size());
    for (size_t i = 0; i < grads[0].size(); ++i) EXPECT_EQ(grads[0][i], grads[1][i]) << "result " << i;
  }
}
