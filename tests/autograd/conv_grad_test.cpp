#include "common/check.h"
#include "lockstep/kernels.h"
#include "lockstep/kernels/tables/conv.h"

using namespace lockstep;
using namespace lockstep::autograd;
using lockstep::testing::gradientsMatch;
using lockstep::testing::randomTensor;

TEST(Conv2d, gradient) {
  Conv2dOptions o;
  o.stride = {2, 1};
  o.padding = {1, 1};
  o.dilation = {1, 2};
  EXPECT_TRUE(gradientsMatch([&](const std::vector<Variable>& in) { return conv2d(in[0], in[1], in[2], o); },
                             {randomTensor({2, 2, 5, 6}, DType::f64, 1),
                              randomTensor({3, 2, 3, 2}, DType::f64, 2), randomTensor({3}, DType::f64, 3)}));
}

TEST(Conv2d, gradient_with_groups_and_fused_relu) {
  Conv2dOptions o;
  o.groups = 2;
  o.fuse_relu = true;
  o.padding = {1, 0};
  EXPECT_TRUE(
      gradientsMatch([&](const std::vector<Variable>& in) { return conv2d(in[0], in[1], Variable(), o); },
                     {randomTensor({1, 4, 4, 3}, DType::f64, 4), randomTensor({4, 2, 2, 2}, DType::f64, 5)}));
}

TEST(Conv2d, gradient_without_input_grad) {
  // The first layer: x needs no gradient, so the backward-data pass is skipped.
  Tensor x = randomTensor({2, 1, 5, 5}, DType::f64, 6);
  EXPECT_TRUE(gradientsMatch([](const std::vector<Variable>& in) { return conv2d(in[0], in[1], in[2], {}); },
                             {x, randomTensor({3, 1, 3, 3}, DType::f64, 7), randomTensor({3}, DType::f64, 8)},
                             1e-6, 1e-6, 1e-5, {0}));
  Variable xv(x, false), w(randomTensor({3, 1, 3, 3}, DType::f64, 7), true);
  conv2d(xv, w, Variable(), {}).backward(Tensor::ones({2, 3, 3, 3}, DType::f64));
  EXPECT_FALSE(xv.hasGrad());
  EXPECT_TRUE(w.hasGrad());
}

TEST(Conv2d, forward_matches_reference) {
  // The autograd op on f32 channels_last input (oneDNN) against the reference kernel.
  Tensor x = randomTensor({2, 3, 7, 6}, DType::f32, 9).toFormat(MemoryFormat::channels_last);
  Tensor w = randomTensor({4, 3, 3, 3}, DType::f32, 10), b = randomTensor({4}, DType::f32, 11);
  Conv2dOptions o;
  o.fuse_relu = true;
  Variable y = conv2d(Variable(x), Variable(w), Variable(b), o);
  EXPECT_TRUE(y.tensor().isChannelsLast());
  EXPECT_TRUE(lockstep::testing::tensorsNear(
      y.tensor(), kernels::reference::kConv.conv2dForward(x, w, b, {{1, 1}, {0, 0}, {1, 1}, 1, true}), 1e-5,
      1e-5));
}

TEST(Conv2d, rejects_mismatched_shapes) {
  Variable x(Tensor::zeros({1, 3, 5, 5}));
  EXPECT_THROW(conv2d(x, Variable(Tensor::zeros({4, 2, 3, 3})), Variable(), {}), ValueError);
  EXPECT_THROW(conv2d(x, Variable(Tensor::zeros({4, 3, 3, 3})), Variable(Tensor::zeros({3})), {}),
               ValueError);
  Conv2dOptions o;
  o.groups = 2;
  EXPECT_THROW(conv2d(x, Variable(Tensor::zeros({4, 3, 3, 3})), Variable(), o), ValueError);
}
