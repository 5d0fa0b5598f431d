// clipGradNorm on GPU gradients against the host: the norm it returns and the clipped gradients
// (f32 tolerance: the f64 sums run in another order), bitwise the same from run to run, the tensor
// form left on the device, error_if_nonfinite, and the clip captured in a CUDA graph and replayed
// on new gradients as the eager clip computes them. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/gpu.h"
#include "lockstep/optim.h"
#include "lockstep/tensor.h"
#include "lockstep/tensor/cuda/graph.h"

using namespace lockstep;
using namespace lockstep::optim;
using autograd::Variable;
using lockstep::testing::closeness;

namespace {

Tensor seeded(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::f32);
  Generator(seed).uniform(t, -1.0, 1.0);
  return t;
}

// 60 parameters as a model has them (weights, biases, one large), on `device`, with gradients
// from `seed`; parameter 4 has none.
std::vector<Variable> params(const Device& device, uint64_t seed) {
  std::vector<Variable> ps;
  for (int i = 0; i < 60; ++i) {
    Shape s = i == 9 ? Shape{512, 300} : i % 2 ? Shape{13 * i + 1} : Shape{7, i + 1};
    ps.emplace_back(seeded(s, i).to(device), true);
    if (i != 4) ps.back().setGrad(seeded(s, seed * 1000 + i).to(device));
  }
  return ps;
}

void expectGradsClose(const std::vector<Variable>& dev, const std::vector<Variable>& host,
                      const std::string& what) {
  for (size_t i = 0; i < host.size(); ++i) {
    ASSERT_EQ(dev[i].hasGrad(), host[i].hasGrad());
    if (!host[i].hasGrad()) continue;
    EXPECT_TRUE(dev[i].grad().isCuda());
    EXPECT_LE(closeness(dev[i].grad(), host[i].grad(), 1e-7, 1e-6), 1.0) << what << " parameter " << i;
  }
}

}  // namespace

TEST(GpuClipGradNorm, matches_the_host_and_repeats_bitwise) {
  LOCKSTEP_REQUIRE_GPU();
  for (double p : {2.0, 1.0, std::numeric_limits<double>::infinity()}) {
    for (double max_norm : {0.5, 1e9}) {
      auto host = params(Device::cpu(), 1), dev = params(Device::cuda(0), 1),
           again = params(Device::cuda(0), 1);
      const double h = clipGradNorm(host, max_norm, {.norm_type = p});
      const double d = clipGradNorm(dev, max_norm, {.norm_type = p});
      EXPECT_NEAR(d, h, 1e-12 * h) << "p " << p;
      expectGradsClose(dev, host, "p " + std::to_string(p));
      Tensor t = clipGradNormTensor(again, max_norm, {.norm_type = p});
      ASSERT_TRUE(t.isCuda());
      EXPECT_EQ(t.item<double>(), d);
      for (size_t i = 0; i < dev.size(); ++i) {
        if (!dev[i].hasGrad()) continue;
        EXPECT_EQ(again[i].grad().toVector<float>(), dev[i].grad().toVector<float>()) << i;
      }
    }
  }
}

TEST(GpuClipGradNorm, a_nonfinite_norm_is_an_error_when_asked) {
  LOCKSTEP_REQUIRE_GPU();
  auto dev = params(Device::cuda(0), 2);
  dev[7].grad().narrow(0, 3, 1).fill(std::numeric_limits<double>::infinity());
  auto before = dev[1].grad().toVector<float>();
  EXPECT_THROW(clipGradNorm(dev, 1.0, {.error_if_nonfinite = true}), ValueError);
  EXPECT_EQ(dev[1].grad().toVector<float>(), before);  // nothing was scaled
  EXPECT_EQ(clipGradNorm(dev, 1.0), std::numeric_limits<double>::infinity());
  EXPECT_EQ(dev[1].grad().toVector<float>()[0], 0.0f);  // coefficient 1 / inf = 0
}

TEST(GpuClipGradNorm, a_captured_clip_replays_as_the_eager_one) {
  LOCKSTEP_REQUIRE_GPU();
  auto graphed = params(Device::cuda(0), 3);
  clipGradNormTensor(graphed, 0.5);  // an eager warmup first, as StepGraph does (kernels loaded)
  cuda::Graph g;
  Tensor norm;  // from the graph's pool: released before the graph
  g.capture(0, [&] { norm = clipGradNormTensor(graphed, 0.5); });
  for (uint64_t seed : {4, 5, 6}) {
    auto eager = params(Device::cuda(0), seed), fresh = params(Device::cpu(), seed);
    for (size_t i = 0; i < graphed.size(); ++i) {
      if (graphed[i].hasGrad()) Tensor(graphed[i].grad()).copyFrom(fresh[i].grad());
    }
    g.replay();
    const double e = clipGradNorm(eager, 0.5);
    EXPECT_EQ(norm.item<double>(), e) << "seed " << seed;
    for (size_t i = 0; i < eager.size(); ++i) {
      if (!eager[i].hasGrad()) continue;
      EXPECT_EQ(graphed[i].grad().toVector<float>(), eager[i].grad().toVector<float>()) << i;
    }
  }
}
