#include "lockstep/kernels/tables/conv.h"

#include "common/check.h"
#include "lockstep/kernels.h"

using namespace lockstep;
using kernels::Conv2dParams;
using lockstep::testing::randomTensor;
using lockstep::testing::tensorsNear;

namespace {
struct ConvCase {
  Shape x, w;
  Conv2dParams p;
  bool bias = true;
  bool channels_last = true;
};

std::vector<ConvCase> cases() {
  std::vector<ConvCase> cs;
  cs.push_back({{32, 1, 28, 28}, {32, 1, 3, 3}, {}, true, false});  // the CNN's first layer (C=1)
  cs.push_back({{2, 32, 13, 13}, {64, 32, 3, 3}, {}});
  cs.push_back(
      {{1, 3, 7, 5}, {5, 3, 3, 2}, {{2, 1}, {1, 0}, {1, 1}, 1, false}, false});   // batch 1, odd sizes
  cs.push_back({{3, 4, 9, 8}, {6, 2, 3, 3}, {{1, 2}, {2, 1}, {2, 1}, 2, true}});  // groups, dilation, relu
  cs.push_back({{2, 5, 6, 6}, {7, 5, 1, 1}, {{1, 1}, {0, 0}, {1, 1}, 1, true}, true, false});  // NCHW, 1x1
  cs.push_back({{2, 6, 5, 5}, {6, 1, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 6, false}});              // depthwise
  return cs;
}

Tensor layout(const Tensor& t, bool channels_last) {
  return channels_last ? t.toFormat(MemoryFormat::channels_last) : t;
}
}  // namespace

TEST(Conv2d, forward_matches_reference) {
  uint64_t seed = 10;
  for (const auto& c : cases()) {
    Tensor x = layout(randomTensor(c.x, DType::f32, seed++), c.channels_last);
    Tensor w = randomTensor(c.w, DType::f32, seed++);
    Tensor b = c.bias ? randomTensor({c.w[0]}, DType::f32, seed++) : Tensor();
    Tensor y = kernels::onednn::kConv.conv2dForward(x, w, b, c.p);
    EXPECT_TRUE(tensorsNear(y, kernels::reference::kConv.conv2dForward(x, w, b, c.p), 1e-4, 1e-4))
        << shapeToString(c.x) << " * " << shapeToString(c.w);
    // oneDNN computes channels_last whatever the input's layout.
    EXPECT_TRUE(y.isChannelsLast()) << shapeToString(c.x);
  }
}

TEST(Conv2d, backward_matches_reference) {
  uint64_t seed = 50;
  for (const auto& c : cases()) {
    Tensor x = layout(randomTensor(c.x, DType::f32, seed++), c.channels_last);
    Tensor w = randomTensor(c.w, DType::f32, seed++);
    Shape ys = kernels::conv2dOutputShape(c.x, c.w, c.p);
    Tensor gy = layout(randomTensor(ys, DType::f32, seed++), c.channels_last);
    Tensor gx = kernels::onednn::kConv.conv2dBackwardData(gy, x, w, c.p);
    EXPECT_TRUE(tensorsNear(gx, kernels::reference::kConv.conv2dBackwardData(gy, x, w, c.p), 1e-4, 1e-4));
    EXPECT_TRUE(gx.isChannelsLast());
    auto fast = kernels::onednn::kConv.conv2dBackwardWeights(gy, x, c.w, c.bias, c.p);
    auto ref = kernels::reference::kConv.conv2dBackwardWeights(gy, x, c.w, c.bias, c.p);
    EXPECT_TRUE(tensorsNear(fast.weight, ref.weight, 1e-3, 1e-4))
        << shapeToString(c.x) << " * " << shapeToString(c.w);
    EXPECT_EQ(fast.bias.defined(), c.bias);
    if (c.bias) {
      EXPECT_TRUE(tensorsNear(fast.bias, ref.bias, 1e-3, 1e-4));
    }
  }
}

TEST(Conv2d, gradient_layout_may_differ_from_input) {
  Tensor x = randomTensor({2, 3, 6, 6}, DType::f32, 1).toFormat(MemoryFormat::channels_last);
  Tensor w = randomTensor({4, 3, 3, 3}, DType::f32, 2);
  Tensor gy = randomTensor({2, 4, 4, 4}, DType::f32, 3);  // contiguous, as after a flatten's backward
  EXPECT_TRUE(tensorsNear(kernels::conv2dBackwardData(gy, x, w, {}),
                          kernels::reference::kConv.conv2dBackwardData(gy, x, w, {}), 1e-4, 1e-4));
}

TEST(Conv2d, rejects_mismatched_shapes) {
  Tensor x = Tensor::zeros({1, 3, 5, 5});
  EXPECT_THROW(kernels::conv2dForward(x, Tensor::zeros({4, 2, 3, 3}), Tensor(), {}), ValueError);
  EXPECT_THROW(kernels::conv2dForward(x, Tensor::zeros({4, 3, 3, 3}), Tensor::zeros({5}), {}), ValueError);
  EXPECT_THROW(kernels::conv2dForward(x, Tensor::zeros({4, 3, 7, 7}), Tensor(), {}), ValueError);
  EXPECT_THROW(kernels::conv2dForward(Tensor::zeros({3, 5, 5}), Tensor::zeros({4, 3, 3, 3}), Tensor(), {}),
               ValueError);
  try {
    kernels::conv2dForward(x, Tensor::zeros({4, 2, 3, 3}), Tensor(), {});
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("[1, 3, 5, 5]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[4, 2, 3, 3]"), std::string::npos) << e.what();
  }
}
