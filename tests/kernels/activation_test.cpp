#include "lockstep/kernels/tables/activation.h"

#include <cmath>
#include <limits>

#include "common/check.h"
#include "lockstep/kernels.h"

using namespace lockstep;
using lockstep::testing::randomTensor;
using lockstep::testing::tensorsNear;

TEST(Relu, forward_matches_reference) {
  for (const Shape& s : std::vector<Shape>{{1}, {7}, {3, 5}, {2, 3, 5, 7}}) {
    Tensor x = randomTensor(s, DType::f32, 3);
    EXPECT_TRUE(tensorsNear(kernels::cpu::kActivation.reluForward(x),
                            kernels::reference::kActivation.reluForward(x), 0.0));
    Tensor gy = randomTensor(s, DType::f32, 4);
    Tensor y = kernels::cpu::kActivation.reluForward(x);
    EXPECT_TRUE(tensorsNear(kernels::cpu::kActivation.reluBackward(gy, y),
                            kernels::reference::kActivation.reluBackward(gy, y), 0.0));
  }
}

TEST(Relu, keeps_channels_last_layout) {
  Tensor x = randomTensor({2, 3, 4, 5}, DType::f32).toFormat(MemoryFormat::channels_last);
  Tensor y = kernels::reluForward(x);
  EXPECT_TRUE(y.isChannelsLast());
  EXPECT_TRUE(tensorsNear(y, kernels::reference::kActivation.reluForward(x), 0.0));
}

namespace {
// Shapes with odd sizes and a single element; the channels_last case checks the flat kernels keep
// the input's layout.
std::vector<Tensor> activationInputs() {
  std::vector<Tensor> xs;
  for (const Shape& s : std::vector<Shape>{{1}, {7}, {3, 5}, {2, 3, 5, 7}})
    xs.push_back(randomTensor(s, DType::f32, 3, -3, 3));
  xs.push_back(randomTensor({2, 3, 4, 5}, DType::f32, 5, -3, 3).toFormat(MemoryFormat::channels_last));
  return xs;
}
}  // namespace

TEST(LeakyRelu, forward_and_backward_match_reference) {
  for (const Tensor& x : activationInputs()) {
    for (double slope : {0.01, 0.2, -0.5}) {
      Tensor gy = randomTensor(x.shape(), DType::f32, 4);
      EXPECT_TRUE(tensorsNear(kernels::onednn::kActivation.leakyReluForward(x, slope),
                              kernels::reference::kActivation.leakyReluForward(x, slope), 1e-7));
      EXPECT_TRUE(tensorsNear(kernels::leakyReluBackward(gy, x, slope),
                              kernels::reference::kActivation.leakyReluBackward(gy, x, slope), 1e-7));
    }
  }
}

// torch.nn.functional.leaky_relu's gradient is gy where x > 0, else gy * slope: a NaN input takes the
// slope (oneDNN's kernel passed gy), in every dtype; the gradient keeps x's layout.
TEST(LeakyRelu, gradient_at_nan_takes_the_slope_as_torch) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    Tensor x = Tensor::fromVector<float>({nan, -1.0f, 0.0f, 2.0f, -inf, inf}, {6}).to(dtype);
    Tensor gy = Tensor::fromVector<float>({4.0f, 4.0f, 4.0f, 4.0f, 4.0f, 4.0f}, {6}).to(dtype);
    const std::vector<float> got = kernels::leakyReluBackward(gy, x, 0.25).to(DType::f32).toVector<float>();
    EXPECT_EQ(got, (std::vector<float>{1.0f, 1.0f, 1.0f, 4.0f, 1.0f, 4.0f})) << dtypeName(dtype);
  }
  Tensor cl = randomTensor({2, 3, 4, 5}, DType::f32, 5, -3, 3).toFormat(MemoryFormat::channels_last);
  EXPECT_TRUE(kernels::leakyReluBackward(randomTensor(cl.shape(), DType::f32, 6), cl, 0.1).isChannelsLast());
}

TEST(Gelu, forward_and_backward_match_reference) {
  for (const Tensor& x : activationInputs()) {
    Tensor gy = randomTensor(x.shape(), DType::f32, 4);
    EXPECT_TRUE(tensorsNear(kernels::onednn::kActivation.geluForward(x),
                            kernels::reference::kActivation.geluForward(x), 1e-6, 1e-5));
    EXPECT_TRUE(tensorsNear(kernels::onednn::kActivation.geluBackward(gy, x),
                            kernels::reference::kActivation.geluBackward(gy, x), 1e-6, 1e-5));
  }
}

TEST(Tanh, forward_and_backward_match_reference) {
  for (const Tensor& x : activationInputs()) {
    Tensor gy = randomTensor(x.shape(), DType::f32, 4);
    Tensor y = kernels::onednn::kActivation.tanhForward(x);
    EXPECT_TRUE(tensorsNear(y, kernels::reference::kActivation.tanhForward(x), 1e-6, 1e-5));
    EXPECT_TRUE(tensorsNear(kernels::onednn::kActivation.tanhBackward(gy, y),
                            kernels::reference::kActivation.tanhBackward(gy, y), 1e-6, 1e-5));
  }
}

TEST(Sigmoid, forward_and_backward_match_reference) {
  for (const Tensor& x : activationInputs()) {
    Tensor gy = randomTensor(x.shape(), DType::f32, 4);
    Tensor y = kernels::onednn::kActivation.sigmoidForward(x);
    EXPECT_TRUE(tensorsNear(y, kernels::reference::kActivation.sigmoidForward(x), 1e-6, 1e-5));
    EXPECT_TRUE(tensorsNear(kernels::onednn::kActivation.sigmoidBackward(gy, y),
                            kernels::reference::kActivation.sigmoidBackward(gy, y), 1e-6, 1e-5));
  }
}

TEST(Sigmoid, keeps_channels_last_layout) {
  Tensor x = randomTensor({2, 3, 4, 5}, DType::f32).toFormat(MemoryFormat::channels_last);
  EXPECT_TRUE(kernels::sigmoidForward(x).isChannelsLast());
  EXPECT_TRUE(kernels::geluForward(x).isChannelsLast());
}

TEST(GeluTanh, keeps_a_dense_inputs_layout_as_the_other_activations) {
  // f32 GELU (tanh) runs lockstep's own flat loops: a transposed or channels_last input keeps its
  // strides, as with oneDNN's activations (silu here) and on a GPU; a view with gaps computes
  // contiguous. The gradient (gy contiguous) takes x's layout too.
  Tensor transposed = randomTensor({5, 3}, DType::f32, 6, -3, 3).transpose(0, 1);
  Tensor cl = randomTensor({2, 3, 4, 5}, DType::f32, 7, -3, 3).toFormat(MemoryFormat::channels_last);
  Tensor gappy = randomTensor({4, 9}, DType::f32, 8, -3, 3).narrow(1, 2, 5);
  for (const Tensor& x : {transposed, cl, gappy}) {
    Tensor gy = randomTensor(x.shape(), DType::f32, 9);
    Tensor y = kernels::geluTanhForward(x), gx = kernels::geluTanhBackward(gy, x);
    const Shape want = x.isDense() ? x.strides() : contiguousStrides(x.shape());
    EXPECT_EQ(y.strides(), want) << x.describe();
    EXPECT_EQ(y.strides(), kernels::siluForward(x).strides()) << x.describe();
    EXPECT_EQ(gx.strides(), want) << x.describe();
    EXPECT_TRUE(tensorsNear(y, kernels::reference::kActivation.geluTanhForward(x), 1e-6, 1e-5));
    EXPECT_TRUE(tensorsNear(gx, kernels::reference::kActivation.geluTanhBackward(gy, x), 1e-6, 1e-4));
  }
}

TEST(Tanh, rejects_mismatched_shapes) {
  Tensor y = randomTensor({3, 4}, DType::f32);
  try {
    kernels::tanhBackward(randomTensor({4, 3}, DType::f32), y);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("tanh"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[4, 3]"), std::string::npos) << e.what();
  }
}

// torch.relu: x < 0 ? 0 : x, so NaN and -0.0 pass; its gradient passes where the output is not
// <= 0, a NaN output's included (oneDNN's relu turned NaN into 0: a network gone NaN looked finite).
TEST(Relu, keeps_nan_and_negative_zero_as_torch_in_every_dtype) {
  // oneDNN has no relu entry (its relu swallows NaN): the cpu loops take every dtype, natively.
  EXPECT_EQ(kernels::onednn::kActivation.reluForward, nullptr);
  EXPECT_EQ(kernels::onednn::kActivation.reluBackward, nullptr);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {nan, -0.0f, 0.0f, -1.0f, 2.0f, inf, -inf};
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    SCOPED_TRACE(dtypeName(t));
    const Tensor xt = Tensor::fromVector(x, {7}).to(t);
    const std::vector<float> y = kernels::reluForward(xt).to(DType::f32).toVector<float>();
    EXPECT_TRUE(std::isnan(y[0]));
    EXPECT_TRUE(y[1] == 0.0f && std::signbit(y[1]));  // -0.0 stays
    EXPECT_TRUE(y[2] == 0.0f && !std::signbit(y[2]));
    EXPECT_TRUE(y[3] == 0.0f && !std::signbit(y[3]));
    EXPECT_EQ(y[4], 2.0f);
    EXPECT_EQ(y[5], inf);
    EXPECT_TRUE(y[6] == 0.0f && !std::signbit(y[6]));
    const Tensor gy = Tensor::full({7}, 3.0).to(t);
    const std::vector<float> gx =
        kernels::reluBackward(gy, kernels::reluForward(xt)).to(DType::f32).toVector<float>();
    EXPECT_EQ(gx, (std::vector<float>{3, 0, 0, 0, 3, 3, 0}));
  }
}
