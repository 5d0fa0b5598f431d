// SGD, Adam and AdamW on GPU parameters against the same optimizers on the host: a group of many
// parameters (several multi-tensor launches), a parameter that joins late (its own step count),
// bitwise equal parameters after several steps. Skips without a GPU.
#include <gtest/gtest.h>

#include <functional>
#include <memory>

#include "common/gpu.h"
#include "lockstep/optim.h"
#include "lockstep/tensor.h"

using namespace lockstep;
using namespace lockstep::optim;
using autograd::Variable;

namespace {

Tensor seeded(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::f32);
  Generator g(seed);
  g.uniform(t, -1.0, 1.0);
  return t;
}

using Make = std::function<std::unique_ptr<Optimizer>(std::vector<Variable>)>;

// Steps the same optimizer on host and GPU copies of 45 parameters (sizes 1 .. 200k, one
// channels-last) with the same gradients; parameter 3 gets its first gradient at step 2.
void expectSameSteps(const Make& make, const std::string& what) {
  std::vector<Variable> host, dev;
  for (int i = 0; i < 45; ++i) {
    Shape s = i == 5 ? Shape{4, 3, 5, 5} : Shape{i == 9 ? 200000 : 7 * i + 1};
    Tensor t = seeded(s, 10 + i);
    if (i == 5) t = t.toFormat(MemoryFormat::channels_last);
    host.emplace_back(t.clone(), true);
    dev.emplace_back(t.to(Device::cuda(0)), true);
  }
  auto opt_host = make(host), opt_dev = make(dev);
  for (int step = 0; step < 4; ++step) {
    for (size_t i = 0; i < host.size(); ++i) {
      if (i == 3 && step < 2) continue;
      Tensor g = seeded(host[i].tensor().shape(), 1000 * step + i);
      host[i].setGrad(g);
      dev[i].setGrad(g.to(Device::cuda(0)));
    }
    opt_host->step();
    opt_dev->step();
  }
  for (size_t i = 0; i < host.size(); ++i) {
    EXPECT_TRUE(dev[i].tensor().isCuda());
    EXPECT_EQ(dev[i].tensor().toVector<float>(), host[i].tensor().toVector<float>())
        << what << " parameter " << i;
  }
}

}  // namespace

TEST(GpuOptim, sgd_adam_and_adamw_match_the_host_bitwise) {
  LOCKSTEP_REQUIRE_GPU();
  expectSameSteps(
      [](std::vector<Variable> p) { return std::make_unique<SGD>(std::move(p), SGDOptions{.lr = 0.1}); },
      "sgd");
  expectSameSteps(
      [](std::vector<Variable> p) {
        return std::make_unique<SGD>(
            std::move(p), SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true});
      },
      "sgd nesterov");
  expectSameSteps(
      [](std::vector<Variable> p) {
        AdamOptions o;
        o.weight_decay = 0.01;
        o.amsgrad = true;
        return std::make_unique<Adam>(std::move(p), o);
      },
      "adam amsgrad");
  expectSameSteps([](std::vector<Variable> p) { return std::make_unique<AdamW>(std::move(p)); }, "adamw");
}
