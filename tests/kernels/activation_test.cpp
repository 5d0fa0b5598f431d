#include "common/check.h"
#include "lockstep/kernels.h"

using namespace lockstep;
using lockstep::testing::randomTensor;
using lockstep::testing::tensorsNear;

TEST(relu, forward_matches_reference) {
  for (const Shape& s : std::vector<Shape>{{1}, {7}, {3, 5}, {2, 3, 5, 7}}) {
    Tensor x = randomTensor(s, DType::f32, 3);
    EXPECT_TRUE(tensorsNear(kernels::onednn::reluForward(x), kernels::reference::reluForward(x), 0.0));
    Tensor gy = randomTensor(s, DType::f32, 4);
    Tensor y = kernels::onednn::reluForward(x);
    EXPECT_TRUE(tensorsNear(kernels::onednn::reluBackward(gy, y), kernels::reference::reluBackward(gy, y), 0.0));
  }
}

TEST(relu, keeps_channels_last_layout) {
  Tensor x = randomTensor({2, 3, 4, 5}, DType::f32).toFormat(MemoryFormat::channels_last);
  Tensor y = kernels::reluForward(x);
  EXPECT_TRUE(y.isChannelsLast());
  EXPECT_TRUE(tensorsNear(y, kernels::reference::reluForward(x), 0.0));
}
