// The training engine: its phases (micro-steps under no_sync, the gradient phase, the update
// phase) against a single process that sees the whole batch, with ranks as threads.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <set>

#include "lockstep/autograd.h"
#include "lockstep/data/samplers/distributed_sampler.h"
#include "lockstep/data/samplers/random_sampler.h"
#include "lockstep/data/samplers/sequential_sampler.h"
#include "lockstep/nn.h"
#include "lockstep/optim.h"
#include "lockstep/parallel.h"
#include "parallel/thread_ranks.h"

using namespace lockstep;
using autograd::Variable;
using parallel::DistributedEnvironment;
using parallel::Engine;
using parallel::EngineOptions;

using lockstep::testing::worldOf;

namespace {

constexpr int64_t kIn = 5, kClasses = 3;

std::shared_ptr<nn::Module> makeNet(uint64_t seed) {
  Generator g(seed);
  nn::ModelOptions o;
  o.in_features = kIn;
  o.out_features = kClasses;
  o.hidden = {7};
  o.generator = &g;
  return nn::makeModel("mlp", o);
}

std::pair<Tensor, Tensor> batch(int step, int64_t rows) {
  Tensor x = Tensor::empty({rows, kIn});
  Generator(100 + step).uniform(x, -1, 1);
  Tensor y = Tensor::empty({rows}, DType::i64);
  Generator g(200 + step);
  for (int64_t i = 0; i < rows; ++i) y.data<int64_t>()[i] = static_cast<int64_t>(g.nextBelow(kClasses));
  return {x, y};
}

EngineOptions sgdOptions() {
  EngineOptions o;
  o.optimizer = {"SGD", {{"lr", 0.1}, {"momentum", 0.9}}};
  return o;
}

double maxAbsDiff(nn::Module& a, nn::Module& b) {
  auto pa = a.namedParameters(), pb = b.namedParameters();
  double d = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    auto va = pa[i].second.tensor().toVector<double>(), vb = pb[i].second.tensor().toVector<double>();
    for (size_t j = 0; j < va.size(); ++j) d = std::max(d, std::abs(va[j] - vb[j]));
  }
  return d;
}

}  // namespace

TEST(Engine, ranks_and_accumulation_match_one_process_with_the_global_batch) {
  // 3 ranks x 2 micro-steps x 2 rows == 1 process x 12 rows, with clipping in the gradient phase.
  const int world = 3, accum = 2, steps = 6;
  const int64_t micro = 2;
  EngineOptions o = sgdOptions();
  o.gradient_clipping = 0.1;
  Engine ref(makeNet(3), o, worldOf(0, 1, nullptr));
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = batch(s, micro * accum * world);
    ref.backward(autograd::crossEntropy(ref.forward(Variable(x)), y));
    ASSERT_TRUE(ref.step());
  }
  EXPECT_GT(ref.lastGradNorm(), 0.1);  // clipping did something
  std::mutex mu;
  o.gradient_accumulation_steps = accum;
  lockstep::testing::runThreadRanks(world, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    Engine engine(makeNet(3 + rank), o, worldOf(rank, world, pg));  // rank 0's weights win
    ASSERT_NE(engine.ddp(), nullptr);
    for (int s = 0; s < steps; ++s) {
      auto [x, y] = batch(s, micro * accum * world);
      for (int m = 0; m < accum; ++m) {
        // Micro-step m of rank r takes rows the single process saw as one batch.
        const int64_t from = (m * world + rank) * micro;
        EXPECT_EQ(engine.isGradientAccumulationBoundary(), m + 1 == accum);
        engine.backward(autograd::crossEntropy(engine.forward(Variable(x.slice(from, from + micro))),
                                               y.slice(from, from + micro)));
        EXPECT_EQ(engine.step(), m + 1 == accum);
      }
    }
    EXPECT_EQ(engine.globalSteps(), steps);
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_LE(maxAbsDiff(*engine.model(), *ref.model()), 1e-5);
  });
}

TEST(Engine, update_phase_steps_schedules_and_clears_gradients) {
  EngineOptions o = sgdOptions();
  o.gradient_accumulation_steps = 2;
  o.scheduler = {"StepLR", {{"step_size", int64_t{1}}, {"gamma", 0.5}}};
  Engine engine(makeNet(1), o, worldOf(0, 1, nullptr));
  auto [x, y] = batch(0, 4);
  engine.backward(autograd::crossEntropy(engine.forward(Variable(x)), y));
  EXPECT_FALSE(engine.step());
  EXPECT_TRUE(engine.model()->parameters()[0].hasGrad());  // kept for the next micro-step
  EXPECT_EQ(engine.globalSteps(), 0);
  engine.backward(autograd::crossEntropy(engine.forward(Variable(x)), y));
  EXPECT_TRUE(engine.step());
  EXPECT_EQ(engine.globalSteps(), 1);
  EXPECT_FALSE(engine.model()->parameters()[0].hasGrad());
  ASSERT_NE(engine.scheduler(), nullptr);
  EXPECT_DOUBLE_EQ(engine.optimizer()->paramGroups()[0].lr(), 0.05);
}

TEST(Engine, discards_a_partial_accumulation_window) {
  // Two engines from the same weights: one sees a stray micro-step that is discarded.
  EngineOptions o = sgdOptions();
  o.gradient_accumulation_steps = 2;
  Engine a(makeNet(5), o, worldOf(0, 1, nullptr)), b(makeNet(5), o, worldOf(0, 1, nullptr));
  auto [stray_x, stray_y] = batch(9, 4);
  a.backward(autograd::crossEntropy(a.forward(Variable(stray_x)), stray_y));
  a.step();
  a.discardPartialAccumulation();
  for (Engine* e : {&a, &b}) {
    for (int m = 0; m < 2; ++m) {
      auto [x, y] = batch(m, 4);
      e->backward(autograd::crossEntropy(e->forward(Variable(x)), y));
      e->step();
    }
  }
  EXPECT_EQ(a.globalSteps(), 1);
  EXPECT_EQ(maxAbsDiff(*a.model(), *b.model()), 0.0);
}

TEST(Engine, trains_with_the_callers_optimizer) {
  auto model = makeNet(2);
  auto opt = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.5});
  Engine engine(model, opt, {}, worldOf(0, 1, nullptr));
  EXPECT_EQ(engine.optimizer(), opt);
  auto before = model->parameters()[0].tensor().clone();
  auto [x, y] = batch(0, 4);
  engine.backward(autograd::crossEntropy(engine.forward(Variable(x)), y));
  EXPECT_TRUE(engine.step());
  EXPECT_NE(before.toVector<double>(), model->parameters()[0].tensor().toVector<double>());
}

TEST(Engine, options_not_implemented_yet_are_errors_naming_them) {
  auto error = [](EngineOptions o) {
    try {
      parallel::validateEngineOptions(o);
    } catch (const ValueError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  try {
    parallel::parsePrecision("fp8");
    ADD_FAILURE() << "fp8 parsed";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("precision 'fp8' is not one of fp32, bf16, fp16"),
              std::string::npos);
  }
  EngineOptions o;
  o.precision = parallel::Precision::bf16;
  EXPECT_EQ(error(o), "no error");
  o.loss_scaler = optim::LossScalerOptions{};
  EXPECT_NE(error(o).find("bf16 with loss scaling"), std::string::npos);
  o = {};
  o.zero_stage = 4;
  EXPECT_NE(error(o).find("ZeRO stage 4 does not exist"), std::string::npos);
  o.zero_stage = 3;
  EXPECT_EQ(error(o), "no error");
  o = {};
  o.gradient_accumulation_steps = 0;
  EXPECT_NE(error(o).find("gradient_accumulation_steps=0"), std::string::npos);
  o = {};
  o.gradient_clipping = std::numeric_limits<double>::infinity();
  EXPECT_NE(error(o).find("gradient_clipping"), std::string::npos);
  EXPECT_EQ(error({}), "no error");
}

TEST(Engine, sampler_is_distributed_only_across_ranks) {
  auto one = parallel::makeTrainSampler(worldOf(0, 1, nullptr), 10, true, 1);
  EXPECT_NE(dynamic_cast<data::RandomSampler*>(one.get()), nullptr);
  auto ordered = parallel::makeTrainSampler(worldOf(0, 1, nullptr), 10, false, 1);
  EXPECT_NE(dynamic_cast<data::SequentialSampler*>(ordered.get()), nullptr);
  lockstep::testing::runThreadRanks(2, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    auto s = parallel::makeTrainSampler(worldOf(rank, 2, pg), 10, true, 1);
    ASSERT_NE(dynamic_cast<data::DistributedSampler*>(s.get()), nullptr);
    EXPECT_EQ(s->size(), 5);
  });
}

namespace {

std::vector<std::vector<double>> parameterValues(nn::Module& m) {
  std::vector<std::vector<double>> out;
  for (auto& [name, p] : m.namedParameters()) out.push_back(p.tensor().toVector<double>());
  return out;
}

// Trains `steps` single-process steps on the global batches, with or without loss scaling.
std::shared_ptr<nn::Module> trainAlone(EngineOptions o, int steps, int64_t rows) {
  Engine engine(makeNet(3), o, worldOf(0, 1, nullptr));
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = batch(s, rows);
    for (int64_t m = 0; m < o.gradient_accumulation_steps; ++m) {
      const int64_t part = rows / o.gradient_accumulation_steps;
      engine.backward(autograd::crossEntropy(engine.forward(Variable(x.slice(m * part, (m + 1) * part))),
                                             y.slice(m * part, (m + 1) * part)));
      engine.step();
    }
    EXPECT_TRUE(engine.wasStepApplied());
  }
  return engine.model();
}

}  // namespace

TEST(Engine, loss_scaling_by_a_power_of_two_changes_no_bit) {
  // Multiplying by 2^k and by 2^-k is exact in f32 (no value comes near the range's ends here), and
  // so is every sum and product the gradient is made of: the scaled run equals the plain one bitwise.
  EngineOptions plain = sgdOptions();
  plain.gradient_clipping = 0.1;
  plain.gradient_accumulation_steps = 3;
  auto reference = trainAlone(plain, 5, 12);
  EngineOptions fixed = plain;
  fixed.loss_scaler = optim::LossScalerOptions{.loss_scale = 1024};
  EXPECT_EQ(maxAbsDiff(*trainAlone(fixed, 5, 12), *reference), 0.0);
  EngineOptions dynamic = plain;
  dynamic.loss_scaler = optim::LossScalerOptions{.loss_scale_window = 2};  // 2^16, doubling every 2
  EXPECT_EQ(maxAbsDiff(*trainAlone(dynamic, 5, 12), *reference), 0.0);
}

TEST(Engine, overflow_on_one_rank_skips_the_step_on_every_rank) {
  // 3 ranks x 2 micro-steps; rank 1's first micro-step of steps 2 and 4 sees an inf input. Without
  // ZeRO DeepSpeed's engine scales as its FP16_Optimizer does: each overflow halves the scale (the
  // hysteresis is its ZeRO scaler's); both steps are skipped everywhere: no update, no schedule step.
  const int world = 3, accum = 2, steps = 6;
  const int64_t micro = 2;
  const std::set<int> overflowing = {2, 4};
  EngineOptions o = sgdOptions();
  o.gradient_clipping = 0.5;
  o.scheduler = {"StepLR", {{"step_size", int64_t{1}}, {"gamma", 0.9}}};
  // The run without the skipped steps, in one process with the global batch.
  Engine ref(makeNet(3), o, worldOf(0, 1, nullptr));
  for (int s = 0; s < steps; ++s) {
    if (overflowing.count(s)) continue;
    auto [x, y] = batch(s, micro * accum * world);
    ref.backward(autograd::crossEntropy(ref.forward(Variable(x)), y));
    ASSERT_TRUE(ref.step());
  }
  o.gradient_accumulation_steps = accum;
  o.loss_scaler = optim::LossScalerOptions{};  // dynamic, 2^16, window 1000, hysteresis 2
  std::mutex mu;
  std::vector<std::vector<std::vector<double>>> final_params(world);
  lockstep::testing::runThreadRanks(world, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    Engine engine(makeNet(3 + rank), o, worldOf(rank, world, pg));
    for (int s = 0; s < steps; ++s) {
      auto [x, y] = batch(s, micro * accum * world);
      const auto before = parameterValues(*engine.model());
      for (int m = 0; m < accum; ++m) {
        const int64_t from = (m * world + rank) * micro;
        Tensor xs = x.slice(from, from + micro).clone();
        if (rank == 1 && m == 0 && overflowing.count(s))
          xs.data<float>()[3] = std::numeric_limits<float>::infinity();
        engine.backward(autograd::crossEntropy(engine.forward(Variable(xs)), y.slice(from, from + micro)));
        EXPECT_EQ(engine.step(), m + 1 == accum);  // a skipped step is still a step taken
        if (m + 1 < accum) {
          EXPECT_FALSE(engine.wasStepApplied());
        }
      }
      EXPECT_EQ(engine.globalSteps(), s + 1);
      EXPECT_EQ(engine.wasStepApplied(), !overflowing.count(s)) << "step " << s;
      if (overflowing.count(s)) {
        EXPECT_EQ(parameterValues(*engine.model()), before) << "step " << s << " changed the parameters";
        EXPECT_FALSE(engine.model()->parameters()[0].hasGrad());  // the bad gradients are dropped
      }
      EXPECT_EQ(engine.lossScale(), s < 2 ? 65536.0 : s < 4 ? 32768.0 : 16384.0) << "after step " << s;
    }
    EXPECT_EQ(engine.skippedSteps(), 2);
    EXPECT_DOUBLE_EQ(engine.optimizer()->paramGroups()[0].lr(), 0.1 * std::pow(0.9, 4));  // 4 applied
    std::lock_guard<std::mutex> lock(mu);
    final_params[rank] = parameterValues(*engine.model());
    EXPECT_LE(maxAbsDiff(*engine.model(), *ref.model()), 1e-5);
  });
  for (int r = 1; r < world; ++r) EXPECT_EQ(final_params[r], final_params[0]) << "rank " << r << " parted";
}

TEST(Engine, loss_scaler_state_and_skipped_steps_resume) {
  EngineOptions o = sgdOptions();
  o.loss_scaler = optim::LossScalerOptions{.initial_scale_power = 4, .hysteresis = 1};
  Engine a(makeNet(1), o, worldOf(0, 1, nullptr));
  auto [x, y] = batch(0, 4);
  Tensor bad = x.clone();
  bad.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  a.backward(autograd::crossEntropy(a.forward(Variable(bad)), y));
  EXPECT_TRUE(a.step());
  EXPECT_FALSE(a.wasStepApplied());
  EXPECT_EQ(a.lossScale(), 8.0);
  ASSERT_NE(a.lossScaler(), nullptr);
  Engine b(makeNet(1), o, worldOf(0, 1, nullptr));
  b.lossScaler()->loadStateDict(a.lossScaler()->stateDict());
  EXPECT_EQ(b.skippedSteps(), 1);
  EXPECT_EQ(b.lossScale(), 8.0);
  Engine plain(makeNet(1), sgdOptions(), worldOf(0, 1, nullptr));
  EXPECT_EQ(plain.lossScaler(), nullptr);
  EXPECT_EQ(plain.lossScale(), 1.0);
  EXPECT_EQ(plain.skippedSteps(), 0);
}

TEST(Engine, bad_loss_scaler_options_are_errors_naming_the_key) {
  EngineOptions o;
  o.loss_scaler = optim::LossScalerOptions{.loss_scale_window = -1};
  try {
    parallel::validateEngineOptions(o);
    FAIL() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("loss_scale_window=-1"), std::string::npos) << e.what();
  }
}

TEST(Engine, ranks_agree_on_an_overflow_their_gradients_do_not_share) {
  // With the "noop" comm hook DDP averages nothing, so only rank 2's gradients hold the inf: the
  // overflow flag's own allreduce must make ranks 0 and 1 skip the step too.
  EngineOptions o = sgdOptions();
  o.ddp.comm_hook = "noop";
  o.loss_scaler = optim::LossScalerOptions{.hysteresis = 1};
  lockstep::testing::runThreadRanks(3, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    Engine engine(makeNet(3), o, worldOf(rank, 3, pg));
    for (int s = 0; s < 2; ++s) {
      auto [x, y] = batch(s, 4);
      if (rank == 2 && s == 1) x.data<float>()[0] = std::numeric_limits<float>::infinity();
      const auto before = parameterValues(*engine.model());
      engine.backward(autograd::crossEntropy(engine.forward(Variable(x)), y));
      EXPECT_TRUE(engine.step());
      EXPECT_EQ(engine.wasStepApplied(), s == 0) << "rank " << rank << " step " << s;
      if (s == 1) {
        EXPECT_EQ(parameterValues(*engine.model()), before) << "rank " << rank;
      }
    }
    EXPECT_EQ(engine.skippedSteps(), 1);
    EXPECT_EQ(engine.lossScale(), 32768.0);
  });
}

TEST(Engine, mixed_precision_keeps_f32_master_weights_and_trains_close_to_f32) {
  auto reference = trainAlone(sgdOptions(), 5, 12);
  for (const char* precision : {"bf16", "fp16"}) {
    SCOPED_TRACE(precision);
    EngineOptions o = sgdOptions();
    o.precision = parallel::parsePrecision(precision);
    Engine engine(makeNet(3), o, worldOf(0, 1, nullptr));
    if (std::string(precision) == "fp16") {
      ASSERT_NE(engine.lossScaler(), nullptr) << "fp16 scales the loss dynamically by default";
      EXPECT_EQ(engine.lossScale(), 65536.0);
    } else {
      EXPECT_EQ(engine.lossScaler(), nullptr);
    }
    for (int s = 0; s < 5; ++s) {
      auto [x, y] = batch(s, 12);
      Variable out = engine.forward(Variable(x));
      EXPECT_EQ(out.dtype(), DType::f32) << "the engine hands the loss f32 outputs";
      engine.backward(autograd::crossEntropy(out, y));
      for (auto& p : engine.model()->parameters()) EXPECT_EQ(p.grad().dtype(), DType::f32);
      engine.step();
    }
    for (auto& p : engine.model()->parameters()) EXPECT_EQ(p.dtype(), DType::f32);
    // Applied steps only: fp16's first steps may overflow at 2^16 and be skipped.
    if (engine.skippedSteps() == 0) {
      EXPECT_LT(maxAbsDiff(*engine.model(), *reference), 2e-2);
      EXPECT_GT(maxAbsDiff(*engine.model(), *reference), 0.0) << "the forward really ran in " << precision;
    }
  }
}

TEST(Engine, auto_cast_casts_the_input_to_the_autocast_dtype) {
  EngineOptions o = sgdOptions();
  o.precision = parallel::Precision::bf16;
  o.auto_cast = true;
  Engine cast(makeNet(3), o, worldOf(0, 1, nullptr));
  o.auto_cast = false;
  Engine plain(makeNet(3), o, worldOf(0, 1, nullptr));
  auto [x, y] = batch(0, 12);
  // The mlp's first op is a linear layer, which casts its input anyway: the same values.
  EXPECT_EQ(cast.forward(Variable(x)).tensor().toVector<float>(),
            plain.forward(Variable(x)).tensor().toVector<float>());
}

// forwardLoss runs the loss under the autocast scope on the output as computed: a language model's
// bf16 logits are not widened first, and the loss and every gradient are bitwise those of
// criterion(forward(x)) (autocast's f32 policy gives cross entropy the same f32 values), with and
// without bf16; without autocast it is criterion(forward(x)) itself.
TEST(Engine, forward_loss_equals_the_loss_of_the_widened_output) {
  for (auto precision : {parallel::Precision::bf16, parallel::Precision::fp32}) {
    auto gpt = [] {
      Generator g(5);
      nn::ModelOptions m;
      m.vocab_size = 17;
      m.block_size = 8;
      m.n_layer = 1;
      m.n_head = 2;
      m.n_embd = 16;
      m.dropout = 0.0;
      m.generator = &g;
      return nn::makeModel("gpt", m);
    };
    EngineOptions o = sgdOptions();
    o.precision = precision;
    Engine fused(gpt(), o, worldOf(0, 1, nullptr)), plain(gpt(), o, worldOf(0, 1, nullptr));
    std::vector<int64_t> tokens(2 * 8);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int64_t>((i * 5 + 3) % 17);
    std::vector<int64_t> next(tokens.size());
    for (size_t i = 0; i < next.size(); ++i) next[i] = static_cast<int64_t>((i * 7 + 1) % 17);
    const Tensor x = Tensor::fromVector(tokens, {2, 8}), y = Tensor::fromVector(next, {2, 8});
    auto lm = [&](const Variable& logits) {
      return autograd::crossEntropy(autograd::reshape(logits, {16, 17}), y.reshape({16}));
    };
    Variable a = fused.forwardLoss(Variable(x), lm), b = lm(plain.forward(Variable(x)));
    ASSERT_EQ(a.dtype(), DType::f32);
    EXPECT_EQ(a.tensor().toVector<float>(), b.tensor().toVector<float>());
    fused.backward(a);
    plain.backward(b);
    const auto pa = fused.model()->namedParameters(), pb = plain.model()->namedParameters();
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t i = 0; i < pa.size(); ++i) {
      EXPECT_EQ(pa[i].second.grad().toVector<float>(), pb[i].second.grad().toVector<float>()) << pa[i].first;
    }
  }
}
