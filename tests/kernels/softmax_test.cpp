#include "lockstep/kernels/tables/softmax.h"

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
