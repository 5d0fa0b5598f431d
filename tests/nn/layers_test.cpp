// Layer modules: each delegates to its op with the right options; losses against torch 1.13.
#include <gtest/gtest.h>

#include "common/check.h"
#include "lockstep/autograd.h"
#include "lockstep/nn.h"

using namespace lockstep;
using namespace lockstep::nn;
using lockstep::testing::randomTensor;
using lockstep::testing::tensorsNear;

TEST(Layers, linear_computes_x_wt_plus_b) {
  Linear fc(LinearOptions{3, 2});
  fc.to(DType::f64);
  Tensor x = randomTensor({4, 3});
  Variable y = fc(Variable(x));
  auto w = fc.weight().tensor().toVector<double>(), b = fc.bias().tensor().toVector<double>(),
       xv = x.toVector<double>();
  auto yv = y.tensor().toVector<double>();
  for (int i = 0; i < 4; ++i) {
    for (int o = 0; o < 2; ++o) {
      double e = b[o];
      for (int k = 0; k < 3; ++k) e += xv[i * 3 + k] * w[o * 3 + k];
      EXPECT_NEAR(yv[i * 2 + o], e, 1e-12);
    }
  }
}

TEST(Layers, conv2d_options_reach_the_op) {
  Conv2dOptions o{.in_channels = 4,
                  .out_channels = 6,
                  .kernel_size = {3, 3},
                  .stride = {2, 2},
                  .padding = {1, 1},
                  .groups = 2};
  Conv2d conv(o);
  Variable y = conv(Variable(randomTensor({2, 4, 9, 9}, DType::f32)));
  EXPECT_EQ(y.shape(), (Shape{2, 6, 5, 5}));
  o.fuse_relu = true;
  Conv2d fused(o);
  fused.loadStateDict(conv.stateDict());
  Variable z = fused(Variable(randomTensor({2, 4, 9, 9}, DType::f32)));
  Variable r = autograd::relu(conv(Variable(randomTensor({2, 4, 9, 9}, DType::f32))));
  EXPECT_TRUE(tensorsNear(z.tensor(), r.tensor(), 1e-5));
  EXPECT_THROW(Conv2d(Conv2dOptions{.in_channels = 3, .out_channels = 4, .groups = 2}), ValueError);
}

TEST(Layers, pooling_shapes) {
  Variable x(randomTensor({1, 2, 7, 7}, DType::f32));
  EXPECT_EQ(MaxPool2d(Pool2dOptions{})(x).shape(), (Shape{1, 2, 3, 3}));
  EXPECT_EQ(AvgPool2d(Pool2dOptions{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}})(x).shape(),
            (Shape{1, 2, 4, 4}));
  EXPECT_EQ(AdaptiveAvgPool2d({1, 1})(x).shape(), (Shape{1, 2, 1, 1}));
  EXPECT_THROW(MaxPool2d(Pool2dOptions{.kernel = {2, 2}, .padding = {2, 2}}), ValueError);
}

TEST(Layers, batch_norm_updates_running_stats_only_in_training) {
  BatchNorm2d bn(BatchNorm2dOptions{3});
  Variable x(randomTensor({4, 3, 5, 5}, DType::f32, 3, 1.0, 3.0));
  bn(x);
  EXPECT_EQ(bn.numBatchesTracked(), 1);
  auto rm = bn.runningMean().toVector<double>();
  for (double v : rm) EXPECT_NEAR(v, 0.1 * 2.0, 0.03);  // momentum 0.1 times a batch mean near 2
  bn.eval();
  Variable y = bn(x);
  EXPECT_EQ(bn.numBatchesTracked(), 1);
  EXPECT_EQ(bn.runningMean().toVector<double>(), rm);
  // Eval: (x - running_mean) / sqrt(running_var + eps) with weight 1, bias 0.
  auto xv = x.tensor().toVector<double>(), yv = y.tensor().toVector<double>(),
       rv = bn.runningVar().toVector<double>();
  EXPECT_NEAR(yv[0], (xv[0] - rm[0]) / std::sqrt(rv[0] + 1e-5), 1e-5);
  BatchNorm2d plain(BatchNorm2dOptions{.num_features = 3, .affine = false, .track_running_stats = false});
  EXPECT_TRUE(plain.parameters().empty());
  EXPECT_TRUE(plain.stateDict().empty());
  plain.eval();
  Variable z = plain(x);  // batch statistics even in eval
  EXPECT_NEAR(autograd::mean(z).item(), 0.0, 1e-5);
  EXPECT_THROW(bn(Variable(randomTensor({4, 2, 5, 5}, DType::f32))), ValueError);
}

TEST(Layers, layer_norm_normalises_trailing_dims) {
  LayerNorm ln(LayerNormOptions{{6}});
  Variable y = ln(Variable(randomTensor({3, 6}, DType::f32, 4, 0.0, 5.0)));
  auto v = y.tensor().toVector<double>();
  for (int r = 0; r < 3; ++r) {
    double m = 0;
    for (int c = 0; c < 6; ++c) m += v[r * 6 + c];
    EXPECT_NEAR(m / 6, 0.0, 1e-5);
  }
}

TEST(Layers, dropout_is_seeded_and_identity_in_eval) {
  Variable x(Tensor::ones({1000}));
  Dropout a(DropoutOptions{.p = 0.3, .seed = 11}), b(DropoutOptions{.p = 0.3, .seed = 11});
  auto ya = a(x).tensor().toVector<float>(), yb = b(x).tensor().toVector<float>();
  EXPECT_EQ(ya, yb);
  int zeros = 0;
  for (float v : ya) {
    if (v == 0.0f) {
      ++zeros;
    } else {
      EXPECT_NEAR(v, 1.0 / 0.7, 1e-6);
    }
  }
  EXPECT_NEAR(zeros, 300, 60);
  EXPECT_NE(a(x).tensor().toVector<float>(), ya);  // the generator advances
  a.eval();
  EXPECT_EQ(a(x).tensor().toVector<float>(), std::vector<float>(1000, 1.0f));
  manualSeed(9);
  Dropout c;
  manualSeed(9);
  Dropout d;
  EXPECT_EQ(c.generator().seed(), d.generator().seed());
  EXPECT_THROW(Dropout(DropoutOptions{.p = 1.5}), ValueError);
}

TEST(Layers, activations_and_flatten) {
  Tensor t = Tensor::fromVector<double>({-2.0, -0.5, 0.0, 1.5}, {2, 2});
  Variable x(t);
  EXPECT_EQ(ReLU()(x).tensor().toVector<double>(), (std::vector<double>{0, 0, 0, 1.5}));
  EXPECT_EQ(LeakyReLU(0.1)(x).tensor().toVector<double>(), (std::vector<double>{-0.2, -0.05, 0, 1.5}));
  EXPECT_NEAR(Tanh()(x).tensor().toVector<double>()[0], std::tanh(-2.0), 1e-12);
  EXPECT_NEAR(Sigmoid()(x).tensor().toVector<double>()[3], 1.0 / (1.0 + std::exp(-1.5)), 1e-12);
  EXPECT_NEAR(GELU()(x).tensor().toVector<double>()[3], 0.5 * 1.5 * (1.0 + std::erf(1.5 / std::sqrt(2.0))),
              1e-12);
  EXPECT_EQ(Flatten()(Variable(Tensor::zeros({2, 3, 4, 5}))).shape(), (Shape{2, 60}));
}

TEST(Layers, losses_match_torch) {
  Variable logits(
      Tensor::fromVector<double>({1.0, 2.0, 0.5, 0.1, -1.0, 3.0, 0.3, 0.3, 0.3, 2.0, -2.0, 0.0}, {4, 3}),
      true);
  Tensor target = Tensor::fromVector<int64_t>({1, 2, 0, 1}, {4});
  // Values from torch 1.13 (tests/nn/torch_reference.py).
  EXPECT_NEAR(CrossEntropyLoss()(logits, target).item(), 1.4441717300591117, 1e-12);
  EXPECT_NEAR(CrossEntropyLoss(CrossEntropyOptions{.reduction = Reduction::sum, .label_smoothing = 0.1})(
                  logits, target)
                  .item(),
              5.89002025356978, 1e-12);
  EXPECT_NEAR(NLLLoss(NLLLossOptions{.ignore_index = 2})(autograd::logSoftmax(logits, 1), target).item(),
              1.9019709004253185, 1e-12);
  EXPECT_NEAR(MSELoss()(logits, Tensor::full({4, 3}, 0.5, DType::f64)).item(), 1.6691666666666665, 1e-12);
  Variable loss = CrossEntropyLoss()(logits, target);
  loss.backward();
  EXPECT_TRUE(logits.hasGrad());
  EXPECT_THROW(CrossEntropyLoss().forward(logits), NotSupportedError);
}
