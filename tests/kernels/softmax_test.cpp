#include "lockstep/kernels/tables/softmax.h"

#include <cmath>
#include <limits>

#include "common/check.h"
#include "lockstep/kernels.h"

using namespace lockstep;
using lockstep::testing::randomTensor;
using lockstep::testing::tensorsNear;

namespace {
struct SoftmaxCase {
  Tensor x;
  int64_t dim;
};
std::vector<SoftmaxCase> softmaxCases() {
  return {{randomTensor({1, 1}, DType::f32, 1, -4, 4), 1},
          {randomTensor({7}, DType::f32, 2, -4, 4), 0},
          {randomTensor({32, 10}, DType::f32, 3, -4, 4), -1},
          {randomTensor({3, 5}, DType::f32, 4, -4, 4), 0},
          {randomTensor({2, 3, 4, 5}, DType::f32, 5, -4, 4), 1},
          {randomTensor({2, 3, 4, 5}, DType::f32, 6, -4, 4).toFormat(MemoryFormat::channels_last), 1},
          {randomTensor({2, 3, 4, 5}, DType::f32, 7, -4, 4), 3}};
}
}  // namespace

TEST(Softmax, forward_and_backward_match_reference) {
  for (const auto& c : softmaxCases()) {
    Tensor y = kernels::onednn::kSoftmax.softmaxForward(c.x, c.dim);
    EXPECT_TRUE(tensorsNear(y, kernels::reference::kSoftmax.softmaxForward(c.x, c.dim), 1e-6, 1e-5))
        << c.x.describe();
    Tensor gy = randomTensor(c.x.shape(), DType::f32, 8);
    EXPECT_TRUE(tensorsNear(kernels::onednn::kSoftmax.softmaxBackward(gy, y, c.dim),
                            kernels::reference::kSoftmax.softmaxBackward(gy, y, c.dim), 1e-6, 1e-5))
        << c.x.describe();
  }
}

TEST(LogSoftmax, forward_and_backward_match_reference) {
  for (const auto& c : softmaxCases()) {
    Tensor y = kernels::onednn::kSoftmax.logSoftmaxForward(c.x, c.dim);
    EXPECT_TRUE(tensorsNear(y, kernels::reference::kSoftmax.logSoftmaxForward(c.x, c.dim), 1e-5, 1e-5))
        << c.x.describe();
    Tensor gy = randomTensor(c.x.shape(), DType::f32, 8);
    EXPECT_TRUE(tensorsNear(kernels::onednn::kSoftmax.logSoftmaxBackward(gy, y, c.dim),
                            kernels::reference::kSoftmax.logSoftmaxBackward(gy, y, c.dim), 1e-5, 1e-5))
        << c.x.describe();
  }
}

TEST(Softmax, keeps_channels_last_layout) {
  Tensor x = randomTensor({2, 3, 4, 5}, DType::f32).toFormat(MemoryFormat::channels_last);
  EXPECT_TRUE(kernels::softmaxForward(x, 1).isChannelsLast());
}

TEST(Softmax, rejects_mismatched_shapes) {
  EXPECT_THROW(kernels::softmaxForward(randomTensor({3, 4}, DType::f32), 2), ValueError);
  try {
    kernels::logSoftmaxBackward(randomTensor({3, 5}, DType::f32), randomTensor({3, 4}, DType::f32), 1);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("[3, 5]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[3, 4]"), std::string::npos) << e.what();
  }
}

// torch: a NaN or +inf in a row makes the whole row NaN (oneDNN's kernel for the innermost
// dimension left the row's other outputs finite: [1, nan, 2] gave [0, nan, 0]); other rows untouched.
TEST(Softmax, a_nan_or_inf_in_a_row_makes_the_row_nan_as_torch) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const Tensor x = Tensor::fromVector(std::vector<float>{1, nan, 2, 1, inf, 2, 1, 2, 3}, {3, 3});
  for (DType t : {DType::f32, DType::bf16}) {
    for (bool log : {false, true}) {
      SCOPED_TRACE(std::string(dtypeName(t)) + (log ? " log_softmax" : " softmax"));
      const Tensor y = log ? kernels::logSoftmaxForward(x.to(t), 1) : kernels::softmaxForward(x.to(t), 1);
      const std::vector<float> v = y.to(DType::f32).toVector<float>();
      for (int i = 0; i < 6; ++i) EXPECT_TRUE(std::isnan(v[i])) << i;
      for (int i = 6; i < 9; ++i) EXPECT_TRUE(std::isfinite(v[i])) << i;
    }
  }
  // The dimension innermost in memory but not last: channels_last over the channels, a transpose.
  Tensor nhwc = randomTensor({2, 3, 2, 2}, DType::f32, 9).toFormat(MemoryFormat::channels_last);
  nhwc.narrow(0, 0, 1).narrow(1, 1, 1).narrow(2, 0, 1).narrow(3, 0, 1).fill(nan);  // n=0, c=1, h=0, w=0
  const Tensor ys = kernels::softmaxForward(nhwc, 1).contiguous();
  for (int64_t c = 0; c < 3; ++c) {
    EXPECT_TRUE(std::isnan(ys.toVector<float>()[static_cast<size_t>(c * 4)])) << c;       // that pixel's row
    EXPECT_FALSE(std::isnan(ys.toVector<float>()[static_cast<size_t>(c * 4 + 1)])) << c;  // another pixel's
  }
  const Tensor xt = x.transpose(0, 1);  // rows of x are columns of xt: softmax over dim 0
  const std::vector<float> vt = kernels::softmaxForward(xt, 0).transpose(0, 1).contiguous().toVector<float>();
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(std::isnan(vt[i])) << i;
  for (int i = 6; i < 9; ++i) EXPECT_TRUE(std::isfinite(vt[i])) << i;
}

// Over a dimension of size 1: softmax is exactly 1 and log_softmax exactly 0 (oneDNN's log_softmax
// gave 1.4e-6), NaN where the input is not finite (inf - inf), as torch; any dtype and dimension.
TEST(Softmax, over_a_size_one_dimension_is_exact_as_torch) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const Tensor x = Tensor::fromVector(std::vector<float>{0.3f, -7.0f, nan, inf, -inf, 1e30f}, {6, 1});
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    for (bool log : {false, true}) {
      SCOPED_TRACE(std::string(dtypeName(t)) + (log ? " log_softmax" : " softmax"));
      const Tensor xt = x.to(t);
      const Tensor y = log ? kernels::logSoftmaxForward(xt, 1) : kernels::softmaxForward(xt, 1);
      const std::vector<float> v = y.to(DType::f32).toVector<float>();
      const float want = log ? 0.0f : 1.0f;
      const bool last_finite = t != DType::f16;  // 1e30 is inf in f16
      for (int i : {0, 1}) EXPECT_EQ(v[static_cast<size_t>(i)], want) << i;
      for (int i : {2, 3, 4}) EXPECT_TRUE(std::isnan(v[static_cast<size_t>(i)])) << i;
      if (last_finite) {
        EXPECT_EQ(v[5], want);
      } else {
        EXPECT_TRUE(std::isnan(v[5]));
      }
      // The same as the dimension of size 1 at the front.
      const Tensor y0 = log ? kernels::logSoftmaxForward(xt.transpose(0, 1), 0)
                            : kernels::softmaxForward(xt.transpose(0, 1), 0);
      EXPECT_EQ(y0.shape(), (Shape{1, 6}));
      EXPECT_EQ(y0.to(DType::f32).toVector<float>()[0], want);
    }
  }
}
