#include "common/check.h"
#include "lockstep/kernels.h"
#include "lockstep/kernels/tables/pool.h"

using namespace lockstep;
using namespace lockstep::autograd;
using lockstep::testing::gradientsMatch;
using lockstep::testing::randomTensor;

TEST(MaxPool2d, gradient) {
  Pool2dOptions o;
  o.kernel = {3, 2};
  o.stride = {2, 1};
  o.padding = {1, 1};
  o.ceil_mode = true;
  EXPECT_TRUE(gradientsMatch([&](const std::vector<Variable>& in) { return maxPool2d(in[0], o); },
                             {randomTensor({2, 2, 5, 4}, DType::f64, 1)}));
}

TEST(AvgPool2d, gradient) {
  for (bool include : {true, false}) {
    Pool2dOptions o;
    o.kernel = {3, 3};
    o.stride = {2, 2};
    o.padding = {1, 1};
    o.ceil_mode = true;
    o.count_include_pad = include;
    EXPECT_TRUE(gradientsMatch([&](const std::vector<Variable>& in) { return avgPool2d(in[0], o); },
                               {randomTensor({1, 2, 6, 5}, DType::f64, 2)}))
        << "count_include_pad " << include;
  }
}

TEST(AdaptiveAvgPool2d, gradient) {
  for (auto out : {std::array<int64_t, 2>{1, 1}, std::array<int64_t, 2>{3, 2}}) {
    EXPECT_TRUE(gradientsMatch([&](const std::vector<Variable>& in) { return adaptiveAvgPool2d(in[0], out); },
                               {randomTensor({2, 2, 5, 4}, DType::f64, 3)}));
  }
}

TEST(MaxPool2d, forward_matches_reference) {
  Tensor x = randomTensor({2, 3, 8, 7}, DType::f32, 4).toFormat(MemoryFormat::channels_last);
  Pool2dOptions o;
  Variable y = maxPool2d(Variable(x, true), o);
  EXPECT_TRUE(y.tensor().isChannelsLast());
  EXPECT_TRUE(lockstep::testing::tensorsNear(
      y.tensor(), kernels::reference::kPool.maxPool2dForward(x, {{2, 2}, {2, 2}}, false).y, 0.0));
  y.backward(Tensor::ones(y.shape()));  // uses the oneDNN workspace kept because x requires grad
}

TEST(Pool2d, rejects_mismatched_shapes) {
  Pool2dOptions o;
  o.kernel = {5, 5};
  EXPECT_THROW(maxPool2d(Variable(Tensor::zeros({1, 1, 4, 4})), o), ValueError);
  EXPECT_THROW(avgPool2d(Variable(Tensor::zeros({4, 4})), {}), ValueError);
  EXPECT_THROW(adaptiveAvgPool2d(Variable(Tensor::zeros({4, 4, 4})), {1, 1}), ValueError);
}

// On the oneDNN path (f32) the backward needs the workspace only: the input's memory is not kept
// by the graph, so a CNN's largest activation is freed as soon as the pool has read it.
TEST(MaxPool2d, f32_graph_does_not_keep_the_input) {
  Tensor x = randomTensor({2, 3, 8, 8}, DType::f32, 4);
  Variable w(Tensor::ones({1}), true);
  Variable xin = mul(Variable(x), w);  // a non-leaf input whose only owner is the graph
  std::weak_ptr<Storage> storage = xin.tensor().storage();
  Variable y = maxPool2d(xin, Pool2dOptions{});
  xin = Variable();
  EXPECT_TRUE(storage.expired());
  sum(y).backward();
  // d/dw sum(maxpool(x * w)) = sum of the window maxima.
  Tensor expect = maxPool2d(Variable(x), Pool2dOptions{}).tensor().to(DType::f64);
  double total = 0;
  for (double v : expect.toVector<double>()) total += v;
  EXPECT_NEAR(w.grad().toVector<float>()[0], total, 1e-4);
}
