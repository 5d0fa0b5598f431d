#include "lockstep/kernels/tables/dropout.h"

#include <random>

#include "common/check.h"
#include "lockstep/kernels.h"

using namespace lockstep;
using lockstep::testing::randomTensor;
using lockstep::testing::tensorsNear;

TEST(Dropout, forward_and_backward_match_reference) {
  for (const Shape& s : std::vector<Shape>{{1}, {7}, {32, 64}, {3, 5, 7}, {70001}}) {
    for (double p : {0.0, 0.1, 0.5, 1.0}) {
      Tensor x = randomTensor(s, DType::f32, 1);
      Generator g1(42), g2(42);
      g1.setState(42, 1000);
      g2.setState(42, 1000);
      auto [y, mask] = kernels::dropoutForward(x, p, g1);
      auto [ry, rmask] = kernels::reference::kDropout.dropoutForward(x, p, g2);
      EXPECT_EQ(mask.toVector<uint8_t>(), rmask.toVector<uint8_t>());
      EXPECT_TRUE(tensorsNear(y, ry, 1e-6, 1e-6));
      EXPECT_EQ(g1.offset(), g2.offset());
      EXPECT_EQ(g1.offset(), 1000u + static_cast<uint64_t>(x.numel()));
      Tensor gy = randomTensor(s, DType::f32, 2);
      EXPECT_TRUE(tensorsNear(kernels::dropoutBackward(gy, mask, p),
                              kernels::reference::kDropout.dropoutBackward(gy, mask, p), 1e-6, 1e-6));
    }
  }
}

TEST(Dropout, vectorised_scales_are_the_per_counter_decisions) {
  // dropoutScales with each instruction set this CPU has (64 counters at a time with AVX-512, 32
  // with AVX2) against dropoutKeepsBelow one counter at a time: odd lengths and starts, calls whose
  // low word wraps past 2^32 inside a vector, keep 0 and 1, arbitrary 32-bit thresholds.
  int tested = 0;
  for (auto isa : {kernels::PhiloxIsa::avx512, kernels::PhiloxIsa::avx2, kernels::PhiloxIsa::scalar}) {
    std::vector<float> probe(1);
    if (!kernels::dropoutScalesWith(isa, 0, 1, 1, 1, 1.0f, probe.data())) continue;
    SCOPED_TRACE("instruction set " + std::to_string(static_cast<int>(isa)));
    ++tested;
    std::mt19937_64 rng(11);
    std::vector<float> out(301);
    int64_t kept = 0, total = 0;
    for (int t = 0; t < 3000; ++t) {
      uint64_t base = rng();
      if (t % 3 == 0) base = ((0xFFFFFFFFull - rng() % 20) << 2) + rng() % 4 + ((rng() % 4) << 34);
      const uint64_t key = rng();
      uint64_t threshold = kernels::dropoutThreshold(static_cast<double>(rng() % 1001) / 1000.0);
      if (t % 5 == 0) threshold = rng() & 0xFFFFFFFFull;
      if (t % 7 == 0) threshold = t % 14 == 0 ? 0 : 1ull << 32;
      const auto n = static_cast<int64_t>(rng() % out.size());
      ASSERT_TRUE(kernels::dropoutScalesWith(isa, base, n, key, threshold, 1.25f, out.data()));
      for (int64_t c = 0; c < n; ++c) {
        const bool keep = kernels::dropoutKeepsBelow(base + static_cast<uint64_t>(c), key, threshold);
        ASSERT_EQ(out[static_cast<size_t>(c)], keep ? 1.25f : 0.0f) << "base " << base << " + " << c;
        kept += keep;
        ++total;
      }
    }
    EXPECT_GT(kept, total / 4);  // the draws were not all one way
    EXPECT_LT(kept, total * 3 / 4);
    // A word equal to the threshold is dropped, one below it kept: check both sides at every phase.
    for (uint64_t c = 0; c < 64; ++c) {
      const uint32_t word = philox4x32(c >> 2, kernels::kDropoutStream, 5)[c & 3];
      for (uint64_t th : {uint64_t{word}, uint64_t{word} + 1}) {
        std::vector<float> one(1), run(40);
        kernels::dropoutScalesWith(isa, c, 1, 5, th, 1.0f, one.data());
        kernels::dropoutScalesWith(isa, c, 40, 5, th, 1.0f, run.data());
        EXPECT_EQ(one[0], th > word ? 1.0f : 0.0f);
        EXPECT_EQ(run[0], one[0]);
      }
    }
  }
  EXPECT_GE(tested, 1);
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

// bf16 and f16 dropout computes in f32 block by block: bitwise what widening the whole tensor,
// dropping in f32 and rounding gives (the emulation it replaces), the same mask and the same
// generator advance; odd sizes past a block, a non-contiguous input, several threads.
TEST(Dropout, low_precision_is_the_f32_computation_rounded) {
  const int before = kernels::numThreads();
  for (DType dt : {DType::bf16, DType::f16}) {
    for (int threads : {1, 3}) {
      kernels::setNumThreads(threads);
      for (const Shape& s : {Shape{5}, Shape{3, 2049}, Shape{70, 1001}}) {
        SCOPED_TRACE(std::string(dtypeName(dt)) + " " + shapeToString(s) + " threads " +
                     std::to_string(threads));
        Tensor x = randomTensor(s, dt, 8);
        if (s.size() == 2) x = randomTensor({s[1], s[0]}, dt, 8).transpose(0, 1);
        Generator g16(21), g32(21);
        auto [y, mask] = kernels::dropoutForward(x, 0.3, g16);
        auto [y32, mask32] = kernels::dropoutForward(x.to(DType::f32), 0.3, g32);
        ASSERT_EQ(y.dtype(), dt);
        EXPECT_TRUE(tensorsNear(y, y32.to(dt), 0, 0));
        EXPECT_EQ(mask.toVector<uint8_t>(), mask32.toVector<uint8_t>());
        EXPECT_EQ(g16.offset(), g32.offset());
        const Tensor gy = randomTensor(s, dt, 9);
        const Tensor gx = kernels::dropoutBackward(gy, mask, 0.3);
        ASSERT_EQ(gx.dtype(), dt);
        EXPECT_TRUE(tensorsNear(gx, kernels::dropoutBackward(gy.to(DType::f32), mask, 0.3).to(dt), 0, 0));
      }
    }
  }
  kernels::setNumThreads(before);
}
