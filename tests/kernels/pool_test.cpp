#include "lockstep/kernels/tables/pool.h"

#include <cmath>
#include <limits>

#include "common/check.h"
#include "lockstep/kernels.h"

using namespace lockstep;
using kernels::Pool2dParams;
using lockstep::testing::randomTensor;
using lockstep::testing::tensorsNear;

namespace {
struct PoolCase {
  Shape x;
  Pool2dParams p;
  bool channels_last = true;
};

std::vector<PoolCase> cases() {
  return {
      {{32, 32, 26, 26}, {}},                                // the CNN's first pool
      {{4, 64, 11, 11}, {}},                                 // odd size: the last row/column is dropped
      {{1, 3, 7, 5}, {{3, 3}, {2, 2}, {1, 1}, true, true}},  // batch 1, padding, ceil_mode
      {{2, 4, 9, 8}, {{3, 2}, {2, 2}, {0, 1}, true, false}, false},  // ceil_mode past the padding, NCHW
      {{2, 3, 6, 5}, {{2, 3}, {1, 2}, {1, 1}, false, false}},        // overlapping windows
      {{2, 5, 5, 5}, {{2, 2}, {2, 2}, {1, 0}, true, true}},          // ceil_mode with count_include_pad
  };
}

Tensor layout(const Tensor& t, bool channels_last) {
  return channels_last ? t.toFormat(MemoryFormat::channels_last) : t;
}
}  // namespace

TEST(Pool2d, output_shape_follows_pytorch) {
  Pool2dParams p;
  p.kernel = {2, 2};
  EXPECT_EQ(kernels::pool2dOutputShape({1, 1, 5, 5}, p, "t"), (Shape{1, 1, 2, 2}));
  p.ceil_mode = true;
  EXPECT_EQ(kernels::pool2dOutputShape({1, 1, 5, 5}, p, "t"), (Shape{1, 1, 3, 3}));
  p.kernel = {3, 3};
  p.stride = {2, 2};
  p.padding = {1, 1};
  // ceil gives 4, but the 4th window would start in the right padding: PyTorch drops it.
  EXPECT_EQ(kernels::pool2dOutputShape({1, 1, 5, 5}, p, "t"), (Shape{1, 1, 3, 3}));
}

TEST(MaxPool2d, forward_matches_reference) {
  uint64_t seed = 1;
  for (const auto& c : cases()) {
    Tensor x = layout(randomTensor(c.x, DType::f32, seed++), c.channels_last);
    auto fast = kernels::onednn::kPool.maxPool2dForward(x, kernels::resolvePool2d(c.p), true);
    EXPECT_TRUE(tensorsNear(
        fast.y, kernels::reference::kPool.maxPool2dForward(x, kernels::resolvePool2d(c.p), true).y, 0.0))
        << shapeToString(c.x);
    EXPECT_EQ(fast.y.isChannelsLast(), x.isChannelsLast());
    EXPECT_TRUE(fast.workspace.defined());
    EXPECT_FALSE(kernels::maxPool2dForward(x, c.p, false).workspace.defined());
  }
}

TEST(MaxPool2d, backward_matches_reference) {
  uint64_t seed = 20;
  for (const auto& c : cases()) {
    Tensor x = layout(randomTensor(c.x, DType::f32, seed++), c.channels_last);
    auto fwd = kernels::maxPool2dForward(x, c.p, true);
    Tensor gy = layout(randomTensor(fwd.y.shape(), DType::f32, seed++), c.channels_last);
    Tensor gx = kernels::maxPool2dBackward(gy, x, fwd.workspace, c.p);
    EXPECT_TRUE(tensorsNear(
        gx, kernels::reference::kPool.maxPool2dBackward(gy, x, Tensor(), kernels::resolvePool2d(c.p)), 1e-6))
        << shapeToString(c.x);
    EXPECT_EQ(gx.isChannelsLast(), x.isChannelsLast());
  }
}

TEST(AvgPool2d, forward_and_backward_match_reference) {
  uint64_t seed = 40;
  for (auto c : cases()) {
    for (bool include : {true, false}) {
      c.p.count_include_pad = include;
      const Pool2dParams p = kernels::resolvePool2d(c.p);
      Tensor x = layout(randomTensor(c.x, DType::f32, seed++), c.channels_last);
      Tensor y = kernels::avgPool2dForward(x, p);
      EXPECT_TRUE(tensorsNear(y, kernels::reference::kPool.avgPool2dForward(x, p), 1e-6, 1e-5))
          << shapeToString(c.x) << " include_pad " << include;
      EXPECT_EQ(y.isChannelsLast(), x.isChannelsLast());
      Tensor gy = layout(randomTensor(y.shape(), DType::f32, seed++), c.channels_last);
      EXPECT_TRUE(tensorsNear(kernels::avgPool2dBackward(gy, x, p),
                              kernels::reference::kPool.avgPool2dBackward(gy, x, p), 1e-6, 1e-5))
          << shapeToString(c.x) << " include_pad " << include;
    }
  }
}

TEST(AdaptiveAvgPool2d, forward_and_backward_match_reference) {
  uint64_t seed = 60;
  struct Case {
    Shape x;
    std::array<int64_t, 2> out;
  };
  for (const auto& c : std::vector<Case>{
           {{2, 8, 6, 6}, {1, 1}}, {{2, 3, 8, 6}, {4, 2}}, {{1, 3, 7, 5}, {3, 2}}, {{2, 4, 3, 3}, {5, 4}}}) {
    Tensor x = randomTensor(c.x, DType::f32, seed++).toFormat(MemoryFormat::channels_last);
    Tensor y = kernels::adaptiveAvgPool2dForward(x, c.out);
    EXPECT_TRUE(tensorsNear(y, kernels::reference::kPool.adaptiveAvgPool2dForward(x, c.out), 1e-6, 1e-5))
        << shapeToString(c.x);
    EXPECT_TRUE(y.isChannelsLast());
    Tensor gy = randomTensor(y.shape(), DType::f32, seed++);
    EXPECT_TRUE(tensorsNear(kernels::adaptiveAvgPool2dBackward(gy, x, c.out),
                            kernels::reference::kPool.adaptiveAvgPool2dBackward(gy, x, c.out), 1e-6, 1e-5));
  }
}

TEST(Pool2d, rejects_bad_shapes_and_options) {
  Pool2dParams p;
  EXPECT_THROW(kernels::maxPool2dForward(Tensor::zeros({3, 4, 4}), p, false), ValueError);
  p.padding = {2, 2};  // more than half the kernel
  EXPECT_THROW(kernels::avgPool2dForward(Tensor::zeros({1, 1, 4, 4}), p), ValueError);
  p = {};
  Tensor x = Tensor::zeros({1, 2, 4, 4});
  auto r = kernels::maxPool2dForward(x, p, true);
  try {
    kernels::maxPool2dBackward(Tensor::zeros({1, 2, 3, 3}), x, r.workspace, p);
    ADD_FAILURE() << "no throw";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("[1, 2, 3, 3]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[1, 2, 2, 2]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(kernels::adaptiveAvgPool2dForward(x, {0, 1}), ValueError);
}

TEST(MaxPool2d, ties_go_to_the_first_maximum) {
  // After a relu whole windows are 0: the gradient must land where PyTorch puts it (the first).
  for (bool cl : {true, false}) {
    Tensor x = layout(Tensor::zeros({2, 3, 6, 6}), cl);
    Pool2dParams p;
    p.kernel = {3, 3};
    p.stride = {2, 2};
    p.padding = {1, 1};
    auto r = kernels::maxPool2dForward(x, p, true);
    Tensor gy = layout(randomTensor(r.y.shape(), DType::f32, 7), cl);
    EXPECT_TRUE(tensorsNear(
        kernels::maxPool2dBackward(gy, x, r.workspace, p),
        kernels::reference::kPool.maxPool2dBackward(gy, x, Tensor(), kernels::resolvePool2d(p)), 1e-6));
  }
}

// As torch: a NaN in a window wins (its gradient goes to it), a window of -inf gives -inf (not
// -FLT_MAX), and with padding the gradient still reaches the window's first maximum; in both
// layouts and in bf16, through the entry points oneDNN's max pooling would answer otherwise.
TEST(MaxPool2d, nan_wins_and_minus_infinity_stays_as_torch) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (DType t : {DType::f32, DType::bf16}) {
    for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
      SCOPED_TRACE(std::string(dtypeName(t)) + (f == MemoryFormat::channels_last ? " nhwc" : " nchw"));
      Pool2dParams p;
      const Tensor x = Tensor::fromVector(std::vector<float>{nan, 1, 2, 3}, {1, 1, 2, 2}).to(t).toFormat(f);
      auto r = kernels::maxPool2dForward(x, p, true);
      EXPECT_TRUE(std::isnan(r.y.to(DType::f32).toVector<float>()[0]));
      const Tensor gx = kernels::maxPool2dBackward(Tensor::ones({1, 1, 1, 1}).to(t), x, r.workspace, p);
      EXPECT_EQ(gx.to(DType::f32).contiguous().toVector<float>(), (std::vector<float>{1, 0, 0, 0}));

      Pool2dParams pad;
      pad.padding = {1, 1};
      const Tensor m = Tensor::full({1, 1, 2, 2}, -inf).to(t).toFormat(f);
      auto q = kernels::maxPool2dForward(m, pad, true);
      for (float v : q.y.to(DType::f32).toVector<float>()) EXPECT_EQ(v, -inf);
      const Tensor gm = kernels::maxPool2dBackward(Tensor::ones(q.y.shape()).to(t), m, q.workspace, pad);
      EXPECT_EQ(gm.to(DType::f32).contiguous().toVector<float>(), (std::vector<float>{1, 1, 1, 1}));
    }
  }
}
