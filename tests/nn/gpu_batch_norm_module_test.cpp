// BatchNorm2d on a GPU keeps all its buffers there, num_batches_tracked included (Module::to moves
// integer buffers too), and counts its training forwards with a kernel: eagerly and in a CUDA graph's
// replays, which read nothing on the host. Its state dict round-trips through the host. Runs with
// ctest -L gpu; skips without a GPU.
#include <gtest/gtest.h>

#include "common/gpu.h"
#include "lockstep/autograd.h"
#include "lockstep/nn.h"
#include "lockstep/tensor/cuda/graph.h"

using namespace lockstep;
using autograd::Variable;
using lockstep::testing::closeness;

namespace {
Tensor input(uint64_t seed) {
  Tensor x = Tensor::empty({4, 3, 5, 5});
  Generator(seed).uniform(x, -1.0, 1.0);
  return x;
}
// The counter itself (stateDict's entries share the module's storage).
Tensor counter(const nn::Module& m) { return m.stateDict().at("num_batches_tracked"); }
}  // namespace

TEST(GpuBatchNormModule, counts_training_forwards_on_the_device_as_the_host_does) {
  LOCKSTEP_REQUIRE_GPU();
  nn::BatchNorm2d host(nn::BatchNorm2dOptions{.num_features = 3});
  nn::BatchNorm2d dev(nn::BatchNorm2dOptions{.num_features = 3});
  dev.to(Device::cuda(0));
  for (const auto& [name, b] : dev.namedBuffers()) EXPECT_TRUE(b.isCuda()) << name;
  EXPECT_EQ(counter(dev).dtype(), DType::i64);
  for (int step = 0; step < 3; ++step) {
    Tensor x = input(step);
    host.forward(Variable(x));
    dev.forward(Variable(x.to(Device::cuda(0))));
  }
  EXPECT_TRUE(counter(dev).isCuda());
  EXPECT_EQ(dev.numBatchesTracked(), 3);
  EXPECT_EQ(host.numBatchesTracked(), 3);
  EXPECT_LE(closeness(dev.runningMean(), host.runningMean(), 1e-6, 1e-5), 1.0);
  EXPECT_LE(closeness(dev.runningVar(), host.runningVar(), 1e-6, 1e-5), 1.0);
  dev.eval();
  dev.forward(Variable(input(9).to(Device::cuda(0))));
  EXPECT_EQ(dev.numBatchesTracked(), 3);  // evaluation counts nothing
  dev.train();
  // The state dict goes to the host and back.
  nn::BatchNorm2d back(nn::BatchNorm2dOptions{.num_features = 3});
  nn::StateDict sd;
  for (const auto& [name, t] : dev.stateDict()) sd.insert(name, t.to(Device::cpu()));
  back.loadStateDict(sd);
  EXPECT_EQ(back.numBatchesTracked(), 3);
  counter(host).fill(7);
  dev.loadStateDict(host.stateDict());
  EXPECT_TRUE(counter(dev).isCuda());
  dev.forward(Variable(input(10).to(Device::cuda(0))));
  EXPECT_EQ(dev.numBatchesTracked(), 8);
}

TEST(GpuBatchNormModule, a_graph_replay_advances_num_batches_tracked) {
  LOCKSTEP_REQUIRE_GPU();
  nn::BatchNorm2d bn(nn::BatchNorm2dOptions{.num_features = 3});
  bn.to(Device::cuda(0));
  Tensor x = input(1).to(Device::cuda(0));
  {
    autograd::NoGradGuard ng;
    bn.forward(Variable(x));  // eager warmup: 1
    cuda::Graph g;
    g.capture(0, [&] { bn.forward(Variable(x)); });  // recorded, not run
    EXPECT_EQ(bn.numBatchesTracked(), 1);
    for (int i = 0; i < 4; ++i) g.replay();
    EXPECT_EQ(bn.numBatchesTracked(), 5);
  }
}
