#include "lockstep/kernels/tables/linear.h"

#include <fstream>
#include <sstream>

#include "common/check.h"
#include "lockstep/kernels.h"

using namespace lockstep;
using lockstep::testing::randomTensor;
using lockstep::testing::tensorsNear;

namespace {
struct LinearCase {
  Shape x;
  int64_t out;
  bool bias;
};
}  // namespace

TEST(Linear, forward_matches_reference) {
  // Odd sizes, batch 1, the benchmark's 576->64->10 at batch 32, and a 3-d input.
  for (const LinearCase& c : std::vector<LinearCase>{{{1, 1}, 1, true},
                                                     {{1, 7}, 3, false},
                                                     {{5, 13}, 9, true},
                                                     {{32, 576}, 64, true},
                                                     {{32, 64}, 10, true},
                                                     {{2, 3, 5}, 4, true},
                                                     {{7}, 3, true}}) {
    const int64_t in = c.x.back();
    Tensor x = randomTensor(c.x, DType::f32, 1), w = randomTensor({c.out, in}, DType::f32, 2);
    Tensor b = c.bias ? randomTensor({c.out}, DType::f32, 3) : Tensor();
    Tensor y = kernels::onednn::kLinear.linearForward(x, w, b);
    EXPECT_TRUE(tensorsNear(y, kernels::reference::kLinear.linearForward(x, w, b), 1e-4, 1e-5))
        << shapeToString(c.x);
    Shape ys = c.x;
    ys.back() = c.out;
    EXPECT_EQ(y.shape(), ys);
  }
}

TEST(Linear, backward_matches_reference) {
  for (const LinearCase& c : std::vector<LinearCase>{{{1, 1}, 1, true},
                                                     {{5, 13}, 9, true},
                                                     {{32, 576}, 64, true},
                                                     {{32, 64}, 10, false},
                                                     {{2, 3, 5}, 4, true}}) {
    const int64_t in = c.x.back();
    Shape ys = c.x;
    ys.back() = c.out;
    Tensor x = randomTensor(c.x, DType::f32, 4), w = randomTensor({c.out, in}, DType::f32, 5);
    Tensor gy = randomTensor(ys, DType::f32, 6);
    EXPECT_TRUE(tensorsNear(kernels::onednn::kLinear.linearBackwardData(gy, w),
                            kernels::reference::kLinear.linearBackwardData(gy, w), 1e-4, 1e-5));
    auto [gw, gb] = kernels::onednn::kLinear.linearBackwardWeights(gy, x, c.bias);
    auto [rw, rb] = kernels::reference::kLinear.linearBackwardWeights(gy, x, c.bias);
    EXPECT_TRUE(tensorsNear(gw, rw, 1e-4, 1e-5));
    EXPECT_EQ(gb.defined(), c.bias);
    if (c.bias) {
      EXPECT_TRUE(tensorsNear(gb, rb, 1e-4, 1e-5));
    }
  }
}

TEST(Linear, takes_strided_inputs_without_copy) {
  // A transposed input and a transposed-back weight view: oneDNN reads them through their strides.
  Tensor x = randomTensor({13, 5}, DType::f32, 1).transpose(0, 1);
  Tensor w = randomTensor({13, 9}, DType::f32, 2).transpose(0, 1);
  Tensor b = randomTensor({9}, DType::f32, 3);
  EXPECT_TRUE(tensorsNear(kernels::onednn::kLinear.linearForward(x, w, b),
                          kernels::reference::kLinear.linearForward(x, w, b), 1e-5, 1e-5));
  Tensor e = randomTensor({1, 13}, DType::f32, 4).expand({4, 13});  // stride 0: copied first
  EXPECT_TRUE(tensorsNear(kernels::onednn::kLinear.linearForward(e, w, b),
                          kernels::reference::kLinear.linearForward(e, w, b), 1e-5, 1e-5));
}

TEST(Linear, handles_empty_batch) {
  Tensor x = Tensor::empty({0, 4}), w = randomTensor({3, 4}, DType::f32), b = randomTensor({3}, DType::f32);
  EXPECT_EQ(kernels::linearForward(x, w, b).shape(), (Shape{0, 3}));
  auto [gw, gb] = kernels::linearBackwardWeights(Tensor::empty({0, 3}), x, true);
  EXPECT_TRUE(tensorsNear(gw, Tensor::zeros({3, 4}), 0.0));
  EXPECT_TRUE(tensorsNear(gb, Tensor::zeros({3}), 0.0));
}

TEST(Linear, rejects_mismatched_shapes) {
  Tensor x = randomTensor({2, 5}, DType::f32), w = randomTensor({3, 4}, DType::f32);
  try {
    kernels::linearForward(x, w, Tensor());
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 5]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[3, 4]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(kernels::linearForward(randomTensor({2, 4}, DType::f32), w, randomTensor({4}, DType::f32)),
               ValueError);
  EXPECT_THROW(kernels::linearForward(randomTensor({2, 4}, DType::f64), w, Tensor()), ValueError);
}

TEST(Matmul, forward_matches_reference) {
  std::vector<std::pair<Shape, Shape>> cases{
      {{1, 1}, {1, 1}},    {{3, 5}, {5, 7}},          {{4, 3, 5}, {4, 5, 2}}, {{4, 3, 5}, {5, 2}},
      {{3, 5}, {4, 5, 2}}, {{2, 1, 3, 4}, {5, 4, 6}}, {{1, 3, 4}, {7, 4, 1}}};
  for (auto& [sa, sb] : cases) {
    Tensor a = randomTensor(sa, DType::f32, 7), b = randomTensor(sb, DType::f32, 8);
    EXPECT_TRUE(tensorsNear(kernels::onednn::kLinear.matmul(a, b), kernels::reference::kLinear.matmul(a, b),
                            1e-5, 1e-5))
        << shapeToString(sa) << " @ " << shapeToString(sb);
  }
}

TEST(Matmul, takes_transposed_views_without_copy) {
  Tensor a = randomTensor({5, 3}, DType::f32, 9).transpose(0, 1);  // [3, 5], strides (1, 3)
  Tensor b = randomTensor({2, 7, 5}, DType::f32, 10).transpose(1, 2);
  EXPECT_TRUE(tensorsNear(kernels::onednn::kLinear.matmul(a, b), kernels::reference::kLinear.matmul(a, b),
                          1e-5, 1e-5));
  Tensor e = randomTensor({1, 3, 5}, DType::f32, 11).expand({2, 3, 5});  // stride 0: copied first
  EXPECT_TRUE(tensorsNear(kernels::onednn::kLinear.matmul(e, b), kernels::reference::kLinear.matmul(e, b),
                          1e-5, 1e-5));
}

TEST(Matmul, backward_matches_reference) {
  std::vector<std::pair<Shape, Shape>> cases{{{3, 5}, {5, 7}},
                                             {{4, 3, 5}, {5, 2}},
                                             {{3, 5}, {4, 5, 2}},
                                             {{2, 1, 3, 4}, {5, 4, 6}},
                                             {{1, 1}, {1, 1}}};
  for (auto& [sa, sb] : cases) {
    Tensor a = randomTensor(sa, DType::f32, 12), b = randomTensor(sb, DType::f32, 13);
    Tensor gy = randomTensor(kernels::matmul(a, b).shape(), DType::f32, 14);
    auto [ga, gb] = kernels::matmulBackward(gy, a, b, true, true);
    auto [ra, rb] =
        kernels::matmulBackward(gy.to(DType::f64), a.to(DType::f64), b.to(DType::f64), true, true);
    EXPECT_TRUE(tensorsNear(ga, ra, 1e-5, 1e-5)) << shapeToString(sa) << " @ " << shapeToString(sb);
    EXPECT_TRUE(tensorsNear(gb, rb, 1e-5, 1e-5)) << shapeToString(sa) << " @ " << shapeToString(sb);
    auto [only_a, none_b] = kernels::matmulBackward(gy, a, b, true, false);
    EXPECT_FALSE(none_b.defined());
  }
}

TEST(Matmul, rejects_mismatched_shapes) {
  try {
    kernels::matmul(randomTensor({2, 3}, DType::f32), randomTensor({4, 5}, DType::f32));
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 3]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[4, 5]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(kernels::matmul(randomTensor({2, 2, 3}, DType::f32), randomTensor({3, 3, 4}, DType::f32)),
               ValueError);
  EXPECT_THROW(kernels::matmul(randomTensor({3}, DType::f32), randomTensor({3, 4}, DType::f32)), ValueError);
}

// cuBLASLt costs a process ~150 MiB of resident memory when loaded: a CUDA build opens it for the
// first GPU GEMM (kernels/cuda/cublaslt.cpp), so CPU ranks never carry it.
TEST(Linear, cpu_gemms_do_not_load_cublaslt) {
  Tensor x = randomTensor({4, 8}, DType::f32, 1), w = randomTensor({3, 8}, DType::f32, 2);
  Tensor y = kernels::linearForward(x, w, Tensor());
  EXPECT_EQ(y.shape(), (Shape{4, 3}));
  std::ifstream maps("/proc/self/maps");
  std::stringstream all;
  all << maps.rdbuf();
  ASSERT_FALSE(all.str().empty());
  EXPECT_EQ(all.str().find("libcublasLt"), std::string::npos) << all.str();
}

// The GELU-epilogue ops on the CPU: the composed kernels (the bias gradient is left to
// linearBackwardWeights), and their shape checks.
TEST(Linear, gelu_epilogue_ops_compose_the_plain_kernels_on_the_cpu) {
  Tensor x = randomTensor({2, 3, 8}, DType::f32, 1), w = randomTensor({16, 8}, DType::f32, 2),
         b = randomTensor({16}, DType::f32, 3);
  auto [y, z] = kernels::linearGeluTanhForward(x, w, b);
  EXPECT_TRUE(tensorsNear(z, kernels::linearForward(x, w, b), 0, 0));
  EXPECT_TRUE(tensorsNear(y, kernels::geluTanhForward(z), 0, 0));
  Tensor w2 = randomTensor({5, 16}, DType::f32, 4), gy = randomTensor({2, 3, 5}, DType::f32, 5);
  auto [gz, gb] = kernels::linearBackwardDataGeluTanh(gy, w2, z, true);
  EXPECT_TRUE(tensorsNear(gz, kernels::geluTanhBackward(kernels::linearBackwardData(gy, w2), z), 0, 0));
  EXPECT_FALSE(gb.defined());
  EXPECT_THROW(kernels::linearBackwardDataGeluTanh(gy, w2, z.narrow(2, 0, 15), true), ValueError);
  EXPECT_THROW(kernels::linearBackwardDataGeluTanh(gy, w2, z.to(DType::f64), true), ValueError);
  EXPECT_THROW(kernels::linearGeluTanhForward(x, w2, Tensor()), ValueError);
  EXPECT_THROW(kernels::linearGeluTanhForward(x, w, randomTensor({15}, DType::f32, 6)), ValueError);
}
