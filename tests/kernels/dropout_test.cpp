#include "common/check.h"
#include "lockstep/kernels.h"

using namespace lockstep;
using lockstep::testing::randomTensor;
using lockstep::testing::tensorsNear;

TEST(Dropout, forward_and_backward_match_reference) {
  for (const Shape& s : std::vector<Shape>{{1}, {7}, {32, 64}, {3, 5, 7}}) {
    for (double p : {0.1, 0.5}) {
      Tensor x = randomTensor(s, DType::f32, 1);
      Generator g1(42), g2(42);
      g1.setState(42, 1000);
      g2.setState(42, 1000);
      auto [y, mask] = kernels::dropoutForward(x, p, g1);
      auto [ry, rmask] = kernels::reference::dropoutForward(x, p, g2);
      EXPECT_EQ(mask.toVector<uint8_t>(), rmask.toVector<uint8_t>());
      EXPECT_TRUE(tensorsNear(y, ry, 1e-6, 1e-6));
      EXPECT_EQ(g1.offset(), g2.offset());
      EXPECT_EQ(g1.offset(), 1000u + static_cast<uint64_t>(x.numel()));
      Tensor gy = randomTensor(s, DType::f32, 2);
      EXPECT_TRUE(tensorsNear(kernels::dropoutBackward(gy, mask, p),
                              kernels::reference::dropoutBackward(gy, mask, p), 1e-6, 1e-6));
    }
  }
}

TEST(Dropout, mask_does_not_depend_on_thread_count) {
  // Large enough for the parallel loop to split the work.
  Tensor x = randomTensor({300, 1000}, DType::f32, 3);
  const int before = kernels::numThreads();
  kernels::setNumThreads(1);
  Generator g1(7);
  auto one = kernels::dropoutForward(x, 0.3, g1).second.toVector<uint8_t>();
  kernels::setNumThreads(4);
  Generator g4(7);
  auto four = kernels::dropoutForward(x, 0.3, g4).second.toVector<uint8_t>();
  kernels::setNumThreads(before);
  EXPECT_EQ(one, four);
  double kept = 0;
  for (uint8_t m : one) kept += m;
  EXPECT_NEAR(kept / static_cast<double>(one.size()), 0.7, 0.01);
}

TEST(Dropout, consecutive_calls_draw_fresh_masks) {
  Tensor x = Tensor::ones({64});
  Generator g(3);
  auto a = kernels::dropoutForward(x, 0.5, g).second.toVector<uint8_t>();
  auto b = kernels::dropoutForward(x, 0.5, g).second.toVector<uint8_t>();
  EXPECT_NE(a, b);
}

TEST(Dropout, rejects_mismatched_shapes) {
  Generator g(1);
  EXPECT_THROW(kernels::dropoutForward(randomTensor({3}, DType::f32), 1.5, g), ValueError);
  auto [y, mask] = kernels::dropoutForward(randomTensor({3, 4}, DType::f32), 0.5, g);
  try {
    kernels::dropoutBackward(randomTensor({4, 3}, DType::f32), mask, 0.5);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("[4, 3]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[3, 4]"), std::string::npos) << e.what();
  }
}
