// A GPT trained data-parallel on 3 ranks (threads) reaches the parameters of one process that sees
// the global batch, with and without activation checkpointing, with DDP and with ZeRO stage 3
// gathering one transformer block at a time (the tied embedding at the root).
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include "lockstep/autograd.h"
#include "lockstep/nn.h"
#include "lockstep/parallel.h"
#include "lockstep/parallel/zero/parameter_coordinator.h"
#include "parallel/thread_ranks.h"

using namespace lockstep;
using autograd::Variable;

using lockstep::testing::worldOf;

namespace {

constexpr int64_t kVocab = 40, kT = 12;

std::shared_ptr<nn::Module> makeGpt(int64_t checkpoint_every) {
  Generator g(21);
  nn::ModelOptions o;
  o.vocab_size = kVocab;
  o.block_size = kT;
  o.n_layer = 2;
  o.n_head = 2;
  o.n_embd = 16;
  o.dropout = 0.0;
  o.checkpoint_every = checkpoint_every;
  o.generator = &g;
  return nn::makeModel("gpt", o);
}

Tensor tokens(int step, int64_t rows, uint64_t salt) {
  Generator g(1000 * step + salt);
  Tensor x = Tensor::empty({rows, kT}, DType::i64);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<int64_t>()[i] = static_cast<int64_t>(g.nextBelow(kVocab));
  return x;
}

Variable lmLoss(parallel::Engine& e, const Tensor& x, const Tensor& y) {
  Variable logits = e.forward(Variable(x));
  return autograd::crossEntropy(autograd::reshape(logits, {x.size(0) * kT, kVocab}), y.reshape({y.numel()}));
}

}  // namespace

TEST(LanguageModelDdp, gpt_on_three_ranks_matches_one_process_with_the_global_batch) {
  const int world = 3, steps = 4;
  const int64_t micro = 2;
  parallel::EngineOptions o;
  o.optimizer = {"AdamW", {{"lr", 3e-3}, {"weight_decay", 0.1}}};
  o.gradient_clipping = 1.0;
  parallel::Engine ref(makeGpt(0), o, worldOf(0, 1, nullptr));
  for (int s = 0; s < steps; ++s) {
    ref.backward(lmLoss(ref, tokens(s, micro * world, 1), tokens(s, micro * world, 2)));
    ASSERT_TRUE(ref.step());
  }
  // Stage 3's gather units are the two transformer blocks.
  EXPECT_EQ(parallel::zeroGatherUnits(*makeGpt(0)).size(), 2u);
  for (auto [ck, stage] : {std::pair<int64_t, int>{0, 0}, {1, 0}, {0, 3}, {1, 3}}) {
    std::mutex mu;
    lockstep::testing::runThreadRanks(world, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
      parallel::EngineOptions zo = o;
      zo.zero_stage = stage;
      zo.zero.param_persistence_threshold = 0;
      zo.zero.max_reuse_distance = 0;
      zo.zero.reduce_bucket_size = 1000;  // several buckets per block
      parallel::Engine engine(makeGpt(ck), zo, worldOf(rank, world, pg));
      for (int s = 0; s < steps; ++s) {
        Tensor x = tokens(s, micro * world, 1), y = tokens(s, micro * world, 2);
        engine.backward(lmLoss(engine, x.slice(rank * micro, (rank + 1) * micro),
                               y.slice(rank * micro, (rank + 1) * micro)));
        ASSERT_TRUE(engine.step());
      }
      if (engine.zero()) engine.zero()->gatherParameters();
      std::lock_guard<std::mutex> lock(mu);
      auto pa = engine.model()->namedParameters(), pb = ref.model()->namedParameters();
      double worst = 0;
      for (size_t i = 0; i < pa.size(); ++i) {
        auto va = pa[i].second.tensor().toVector<double>(), vb = pb[i].second.tensor().toVector<double>();
        for (size_t j = 0; j < va.size(); ++j) worst = std::max(worst, std::abs(va[j] - vb[j]));
      }
      EXPECT_LE(worst, 2e-5) << "rank " << rank << ", checkpoint_every " << ck << ", ZeRO stage " << stage;
    });
  }
}
