#pragma once
// What the ZeRO engine tests share: a 74-parameter MLP (divisible by neither 3 nor 4), its batches,
// thread-rank training through the Engine, and the comparison with DDP.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "lockstep/autograd.h"
#include "lockstep/nn.h"
#include "lockstep/optim.h"
#include "lockstep/parallel.h"
#include "parallel/thread_ranks.h"

namespace lockstep::testing::zero {

using autograd::Variable;
using parallel::DistributedEnvironment;
using parallel::Engine;
using parallel::EngineOptions;
using testing::worldOf;

constexpr int64_t kIn = 5, kClasses = 2, kRows = 3;

inline std::shared_ptr<nn::Module> makeNet(uint64_t seed) {
  Generator g(seed);
  nn::ModelOptions o;
  o.in_features = kIn;
  o.out_features = kClasses;
  o.hidden = {9};  // 5*9 + 9 + 9*2 + 2 = 74 parameters
  o.generator = &g;
  return nn::makeModel("mlp", o);
}

// Six Linear layers (5-7-6-8-5-7-2): six gather units at stage 3.
inline std::shared_ptr<nn::Module> makeDeepNet(uint64_t seed) {
  Generator g(seed);
  nn::ModelOptions o;
  o.in_features = kIn;
  o.out_features = kClasses;
  o.hidden = {7, 6, 8, 5, 7};
  o.generator = &g;
  return nn::makeModel("mlp", o);
}

inline std::pair<Tensor, Tensor> batch(int seed, int64_t rows) {
  Tensor x = Tensor::empty({rows, kIn});
  Generator(100 + seed).uniform(x, -1, 1);
  Tensor y = Tensor::empty({rows}, DType::i64);
  Generator g(500 + seed);
  for (int64_t i = 0; i < rows; ++i) y.data<int64_t>()[i] = static_cast<int64_t>(g.nextBelow(kClasses));
  return {x, y};
}

inline std::vector<double> flatParams(const nn::Module& m) {
  std::vector<double> out;
  for (auto& [name, p] : m.namedParameters()) {
    auto v = p.tensor().toVector<double>();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// Trains `steps` optimizer steps on `world` thread ranks; returns every rank's final parameters.
inline std::vector<std::vector<double>> train(int world, const EngineOptions& o, int steps = 20) {
  std::vector<std::vector<double>> out(world);
  lockstep::testing::runThreadRanks(world, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    Engine engine(makeNet(7 + rank), o, worldOf(rank, world, pg));  // rank 0's weights win
    EXPECT_EQ(engine.zero() != nullptr, o.zero_stage > 0);
    int micro = 0;
    for (int s = 0; s < steps;) {
      auto [x, y] = batch(micro++ * world + rank, kRows);
      engine.backward(autograd::crossEntropy(engine.forward(Variable(x)), y));
      if (engine.step()) ++s;
    }
    if (engine.zero()) engine.zero()->gatherParameters();  // stage 3 keeps only its partition
    out[rank] = flatParams(*engine.model());
  });
  return out;
}

// max |a - b| / max |b|
inline double relDiff(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0, m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, std::abs(a[i] - b[i]));
    m = std::max(m, std::abs(b[i]));
  }
  return d / m;
}

inline void expectSameAsDdp(const EngineOptions& base, int world, int stage, const char* what) {
  EngineOptions o = base;
  const auto ddp = train(world, o);
  o.zero_stage = stage;
  const auto zero = train(world, o);
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(zero[r], zero[0]) << "ranks part ways: rank " << r;
    const double d = relDiff(zero[r], ddp[0]);
    EXPECT_LE(d, 1e-6) << what << " stage " << stage << " world " << world << " rank " << r;
    if (r == 0)
      std::printf("[ zero ] %s stage %d world %d: relative difference to DDP %.3g%s\n", what, stage, world, d,
                  d == 0 ? " (bitwise)" : "");
  }
}

inline EngineOptions sgd() {
  EngineOptions o;
  o.optimizer = {"SGD", {{"lr", 0.1}, {"momentum", 0.9}}};
  return o;
}

inline EngineOptions adam() {
  EngineOptions o;
  o.optimizer = {"Adam", {{"lr", 0.01}}};
  return o;
}

// Stage 3 gathering each layer for its forward and backward alone: no parameter is small enough
// to persist, and no layer is kept whole between its forward and its backward.
inline EngineOptions perLayer(EngineOptions o) {
  o.zero.param_persistence_threshold = 0;
  o.zero.max_reuse_distance = 0;
  return o;
}

}  // namespace lockstep::testing::zero
