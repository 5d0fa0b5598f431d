// Horovod-style DistributedOptimizer with ranks as threads (shm backend).
#include <gtest/gtest.h>

#include <mutex>
#include <thread>

#include "lockstep/autograd.h"
#include "lockstep/comm/init.h"
#include "lockstep/comm/store/hash_store.h"
#include "lockstep/nn.h"
#include "lockstep/optim.h"
#include "lockstep/parallel.h"
#include "parallel/thread_ranks.h"

using namespace lockstep;
using autograd::Variable;
using parallel::DistributedOptimizer;
using parallel::DistributedOptimizerOptions;

namespace {

std::shared_ptr<nn::Module> makeNet(uint64_t seed) {
  Generator g(seed);
  nn::ModelOptions o;
  o.in_features = 5;
  o.out_features = 2;
  o.hidden = {7};
  o.generator = &g;
  return nn::makeModel("mlp", o);
}

std::pair<Tensor, Tensor> batch(int step, int64_t rows) {
  Tensor x = Tensor::empty({rows, 5});
  Generator(300 + step).uniform(x, -1, 1);
  Tensor y = Tensor::empty({rows}, DType::i64);
  for (int64_t i = 0; i < rows; ++i) y.data<int64_t>()[i] = (i + step) % 2;
  return {x, y};
}

void runRanks(int world, const std::function<void(int, std::shared_ptr<comm::ProcessGroup>)>& fn) {
  lockstep::testing::runThreadRanks(world, fn);
}

double maxAbsDiff(const Tensor& a, const Tensor& b) {
  auto va = a.toVector<double>(), vb = b.toVector<double>();
  double d = 0;
  for (size_t i = 0; i < va.size(); ++i) d = std::max(d, std::abs(va[i] - vb[i]));
  return d;
}

}  // namespace

TEST(DistributedOptimizer, matches_single_process_with_tiny_fusion_buffers) {
  const int world = 3, steps = 10;
  const int64_t b = 4;
  auto ref = makeNet(10);  // rank 0's model: broadcastParameters copies it everywhere
  optim::SGDOptions so;
  so.lr = 0.1;
  so.momentum = 0.9;
  optim::SGD ref_opt(ref->parameters(), so);
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = batch(s, b * world);
    ref_opt.zeroGrad();
    autograd::crossEntropy(ref->forward(Variable(x)), y).backward();
    ref_opt.step();
  }
  std::mutex mu;
  runRanks(world, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    auto net = makeNet(10 + rank);
    parallel::broadcastParameters(net->parameters(), *pg);
    DistributedOptimizerOptions o;
    o.fusion_threshold_bytes = 64;  // many fusion buffers
    DistributedOptimizer opt(std::make_shared<optim::SGD>(net->parameters(), so), pg, o);
    for (int s = 0; s < steps; ++s) {
      auto [x, y] = batch(s, b * world);
      opt.zeroGrad();
      autograd::crossEntropy(net->forward(Variable(x.slice(rank * b, (rank + 1) * b))),
                             y.slice(rank * b, (rank + 1) * b))
          .backward();
      opt.step();
    }
    std::lock_guard<std::mutex> lock(mu);
    auto got = net->parameters(), want = ref->parameters();
    for (size_t i = 0; i < got.size(); ++i) EXPECT_LE(maxAbsDiff(got[i].tensor(), want[i].tensor()), 1e-5);
  });
}

TEST(DistributedOptimizer, backward_passes_per_step_and_fp16) {
  runRanks(2, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    auto net = makeNet(4);
    DistributedOptimizerOptions o;
    o.backward_passes_per_step = 2;
    o.compression = parallel::Compression::fp16;
    DistributedOptimizer opt(std::make_shared<optim::SGD>(net->parameters(), optim::SGDOptions{}), pg, o);
    auto [x, y] = batch(0, 8);
    autograd::crossEntropy(net->forward(Variable(x)), y).backward();
    try {
      opt.step();
      FAIL() << "expected an error after 1 of 2 backward passes";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("after 1 backward passes"), std::string::npos) << e.what();
    }
    autograd::crossEntropy(net->forward(Variable(x)), y).backward();
    EXPECT_NO_THROW(opt.step());
  });
}

TEST(DistributedOptimizer, broadcast_optimizer_state_copies_root_state) {
  std::vector<std::vector<float>> momenta(2);
  runRanks(2, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    auto net = makeNet(6);
    optim::SGDOptions so;
    so.momentum = 0.9;
    so.lr = rank == 0 ? 0.5 : 0.1;
    optim::SGD opt(net->parameters(), so);
    if (rank == 0) {  // only the root has momentum buffers
      auto [x, y] = batch(0, 4);
      autograd::crossEntropy(net->forward(Variable(x)), y).backward();
      opt.step();
    }
    parallel::broadcastOptimizerState(opt, *pg);
    EXPECT_DOUBLE_EQ(opt.paramGroups()[0].lr(), 0.5);
    auto sd = opt.stateDict();
    ASSERT_TRUE(sd.state.contains("0.momentum_buffer"));
    momenta[rank] = sd.state.at("0.momentum_buffer").toVector<float>();
  });
  EXPECT_EQ(momenta[0], momenta[1]);
}
