// ZeRO with bf16 / f16 parameters and f32 master weights (ZeroOptions::param_dtype, DeepSpeed's
// bf16 / fp16 with ZeRO): the model holds 16-bit parameters and gradients, each rank's partition
// the f32 values the optimizer steps. Trained through the engine on thread ranks against DDP's
// autocast run (f32 parameters), checked for the layout (dtypes, bytes per rank: DeepSpeed's
// formulas), for updates too small for the 16-bit parameters still adding up in the master weights,
// and for a resume from f32 values. With master_weights_in_param_dtype (DeepSpeed's
// bf16_master_weights_and_grads + bf16_optimizer_states) no f32 copy is kept: the bf16 parameters
// and bf16 optimizer states are stepped in place, as torch's fused Adam steps bf16 parameters.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "lockstep/autograd.h"
#include "lockstep/nn.h"
#include "lockstep/optim.h"
#include "lockstep/parallel.h"
#include "parallel/thread_ranks.h"
#include "parallel/zero_engine_helpers.h"

using namespace lockstep;
using namespace lockstep::testing::zero;

namespace {

EngineOptions withMasterWeights(EngineOptions o, parallel::Precision precision, int stage) {
  o.precision = precision;
  o.zero_stage = stage;
  o.zero.param_dtype = parallel::precisionDType(precision);
  return o;
}

// bf16 master weights: the parameters are their own master weights.
EngineOptions withBf16MasterWeights(EngineOptions o, int stage) {
  o = withMasterWeights(std::move(o), parallel::Precision::bf16, stage);
  o.zero.master_weights_in_param_dtype = true;
  return o;
}

// The f32 master values of every parameter, put together from every rank's owned segments.
std::vector<double> masterValues(const std::vector<std::vector<parallel::ZeroOptimizer::OwnedSegment>>& ranks,
                                 const std::vector<int64_t>& offsets, int64_t total, DType want) {
  std::vector<double> out(static_cast<size_t>(total), std::nan(""));
  for (const auto& segments : ranks) {
    for (const auto& s : segments) {
      EXPECT_EQ(s.values.dtype(), want);
      const auto v = s.values.toVector<double>();
      for (int64_t i = 0; i < s.numel; ++i)
        out[static_cast<size_t>(offsets[s.param] + s.param_offset + i)] = v[i];
    }
  }
  return out;
}

// Every optimizer state tensor but the step counts is of `dtype`.
void expectStatesOf(const optim::OptimizerStateDict& sd, DType dtype) {
  ASSERT_FALSE(sd.state.empty());
  for (const auto& [key, t] : sd.state) {
    if (key.find("step") == std::string::npos) {
      EXPECT_EQ(t.dtype(), dtype) << key;
    }
  }
}

struct MasterRun {
  std::vector<std::vector<double>> params;  // each rank's parameters (their 16-bit values)
  std::vector<double> master;               // the partition's f32 values, put together
  std::vector<parallel::ModelStateBytes> memory;
};

MasterRun trainWithMasterWeights(int world, const EngineOptions& o, int steps) {
  MasterRun out;
  out.params.resize(world);
  out.memory.resize(world);
  std::vector<std::vector<parallel::ZeroOptimizer::OwnedSegment>> segments(world);
  std::vector<int64_t> offsets;
  int64_t total = 0;
  lockstep::testing::runThreadRanks(world, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    Engine engine(makeNet(7 + rank), o, worldOf(rank, world, pg));
    for (const auto& p : engine.model()->parameters())
      EXPECT_EQ(p.dtype(), *o.zero.param_dtype) << "the model's parameters are rounded to param_dtype";
    int micro = 0;
    for (int s = 0; s < steps;) {
      auto [x, y] = batch(micro++ * world + rank, kRows);
      engine.backward(autograd::crossEntropy(engine.forward(Variable(x)), y));
      if (engine.step()) ++s;
    }
    out.memory[rank] = engine.memory();
    for (auto& s : engine.zero()->ownedSegments()) {
      s.values = s.values.clone();
      segments[rank].push_back(s);
    }
    engine.zero()->gatherParameters();
    out.params[rank] = flatParams(*engine.model());
    if (rank == 0) {
      for (const auto& p : engine.zero()->parameters()) {
        offsets.push_back(total);
        total += p.numel();
      }
    }
  });
  out.master = masterValues(segments, offsets, total,
                            o.zero.master_weights_in_param_dtype ? *o.zero.param_dtype : DType::f32);
  return out;
}

}  // namespace

TEST(ZeroMasterWeights, bf16_and_fp16_parameters_train_within_their_rounding_of_ddp_at_stages_1_to_3) {
  // Against DDP under autocast (f32 parameters): the same forward (autocast rounds the f32 weights
  // the same way) and the same 16-bit weight gradients (autocast's come back through the cast), so
  // one rank is bit for bit DDP's; with more, the 16-bit sums of the reduction differ from f32's.
  // 20 Adam steps; the bound is a few roundings of each dtype over the run. fp16 brings the loss
  // scaler (unscaled in the f32 copies), here at 2^8 so that neither run overflows and skips (a
  // 16-bit sum overflows sooner than an f32 one, as in DeepSpeed).
  // Both starts: DeepSpeed's (the initial parameters rounded to 16 bits, its bf16/fp16 sections)
  // and torch.autocast's (as given), the same for DDP and ZeRO.
  for (auto [precision, bound, rounded] : {std::tuple{parallel::Precision::bf16, 4e-3, true},
                                           {parallel::Precision::fp16, 1e-3, true},
                                           {parallel::Precision::bf16, 4e-3, false}}) {
    EngineOptions base = adam();
    base.precision = precision;
    base.round_initial_parameters = rounded;
    if (precision == parallel::Precision::fp16) {
      base.loss_scaler = optim::LossScalerOptions{};
      base.loss_scaler->initial_scale_power = 8;
    }
    for (int world : {1, 2, 3}) {
      const auto ddp = train(world, base);
      for (int stage : {1, 2, 3}) {
        EngineOptions o = withMasterWeights(base, precision, stage);
        o.zero.reduce_bucket_size = 30;  // pieces straddle parameters
        const MasterRun run = trainWithMasterWeights(world, o, 20);
        SCOPED_TRACE(std::string(parallel::precisionName(precision)) + " stage " + std::to_string(stage) +
                     " world " + std::to_string(world) + (rounded ? " rounded start" : ""));
        for (int r = 0; r < world; ++r) EXPECT_EQ(run.params[r], run.params[0]) << "ranks part ways: " << r;
        const double d = relDiff(run.master, ddp[0]);
        EXPECT_LE(d, bound);
        if (world == 1) {
          EXPECT_EQ(d, 0.0) << "one rank reduces nothing: DDP's autocast run bit for bit";
        } else {
          EXPECT_GT(d, 0.0) << "16-bit sums cannot give an f32 reduction's bits";
        }
        // The parameters are the master weights rounded.
        const DType low = *o.zero.param_dtype;
        for (size_t i = 0; i < run.master.size(); ++i) {
          const double rounded = Tensor::scalar(run.master[i], DType::f32).to(low).itemDouble();
          ASSERT_EQ(run.params[0][i], rounded) << "element " << i;
        }
        std::printf("[ zero ] %s master weights stage %d world %d: relative difference to DDP %.3g\n",
                    parallel::precisionName(precision), stage, world, d);
      }
    }
  }
}

TEST(ZeroMasterWeights, accumulation_clipping_and_loss_scaling_work_on_the_f32_copies) {
  // 3 micro-steps per step (16-bit gradients accumulated, reduced once), clipping below the norm
  // (every step clips: the partition's f32 norm joined across ranks, also at stage 1), and for
  // fp16 the loss scaler's unscale and overflow check on the f32 copies.
  for (auto precision : {parallel::Precision::bf16, parallel::Precision::fp16}) {
    EngineOptions base = sgd();
    base.precision = precision;
    base.gradient_accumulation_steps = 3;
    base.gradient_clipping = 0.05;
    if (precision == parallel::Precision::fp16) {
      base.loss_scaler = optim::LossScalerOptions{};
      base.loss_scaler->initial_scale_power = 8;
    }
    const auto ddp = train(2, base);
    for (int stage : {1, 2, 3}) {
      SCOPED_TRACE(std::string(parallel::precisionName(precision)) + " stage " + std::to_string(stage));
      const MasterRun run = trainWithMasterWeights(2, withMasterWeights(base, precision, stage), 20);
      EXPECT_EQ(run.params[1], run.params[0]);
      const double d = relDiff(run.master, ddp[0]);
      EXPECT_LE(d, precision == parallel::Precision::bf16 ? 4e-3 : 1e-3);
      std::printf("[ zero ] %s master weights, accumulation 3 + clipping stage %d world 2: %.3g\n",
                  parallel::precisionName(precision), stage, d);
    }
  }
}

TEST(ZeroMasterWeights, bf16_master_weights_in_bf16_clip_their_bf16_gradients) {
  // No f32 copies: accumulation and clipping work on the bf16 gradients themselves (scaled in f32,
  // rounded once), at every stage; the run follows DDP's clipped run, not its unclipped one.
  EngineOptions base = sgd();
  base.precision = parallel::Precision::bf16;
  base.gradient_accumulation_steps = 2;
  EngineOptions clipped = base;
  clipped.gradient_clipping = 0.05;
  const auto ddp = train(2, clipped);
  const auto unclipped = train(2, base);
  const double apart = relDiff(unclipped[0], ddp[0]);
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    const MasterRun run = trainWithMasterWeights(2, withBf16MasterWeights(clipped, stage), 20);
    EXPECT_EQ(run.params[1], run.params[0]);
    const double d = relDiff(run.params[0], ddp[0]);
    EXPECT_LE(d, 4e-2);
    EXPECT_LT(d, apart / 2) << "clipping did not act (unclipped DDP is " << apart << " away)";
    std::printf(
        "[ zero ] bf16 master weights in bf16, accumulation 2 + clipping, stage %d world 2: %.3g "
        "(unclipped %.3g)\n",
        stage, d, apart);
  }
}

TEST(ZeroMasterWeights, bf16_steps_whose_gradients_hold_a_nan_on_any_rank_are_skipped) {
  // EngineOptions::skip_nonfinite_steps (DeepSpeed's bf16.check_grad_overflow at stages 1 and 2):
  // rank 1's third batch holds a NaN; both ranks skip that step (the parameters as before it), count
  // it and train on, finite and in step. Without the check the NaN reaches every parameter.
  for (int stage : {1, 2}) {
    for (bool skip : {true, false}) {
      SCOPED_TRACE("stage " + std::to_string(stage) + (skip ? " skipping" : " not skipping"));
      EngineOptions o = withMasterWeights(adam(), parallel::Precision::bf16, stage);
      o.skip_nonfinite_steps = skip;
      std::vector<std::vector<double>> before(2), after(2), end(2);
      std::vector<int64_t> skipped(2);
      std::vector<int> applied(2);
      lockstep::testing::runThreadRanks(2, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
        Engine engine(makeNet(7 + rank), o, worldOf(rank, 2, pg));
        for (int s = 0; s < 5; ++s) {
          auto [x, y] = batch(s * 2 + rank, kRows);
          if (s == 2 && rank == 1) x.data<float>()[0] = std::nanf("");
          if (s == 2) before[rank] = flatParams(*engine.model());
          engine.backward(autograd::crossEntropy(engine.forward(Variable(x)), y));
          EXPECT_TRUE(engine.step());
          if (s == 2) {
            after[rank] = flatParams(*engine.model());
            applied[rank] = engine.wasStepApplied() ? 1 : 0;
          }
        }
        skipped[rank] = engine.skippedSteps();
        end[rank] = flatParams(*engine.model());
      });
      for (int r = 0; r < 2; ++r) {
        const bool any_nan =
            std::any_of(end[r].begin(), end[r].end(), [](double v) { return std::isnan(v); });
        if (skip) {
          EXPECT_EQ(after[r], before[r]) << "rank " << r << " stepped";
          EXPECT_EQ(applied[r], 0) << r;
          EXPECT_EQ(skipped[r], 1) << r;
          EXPECT_FALSE(any_nan) << r;
          EXPECT_NE(end[r], after[r]) << "rank " << r << " stopped training";
        } else {
          EXPECT_EQ(applied[r], 1) << r;
          EXPECT_EQ(skipped[r], 0) << r;
          EXPECT_TRUE(any_nan) << r;
        }
      }
      if (skip) {
        EXPECT_EQ(end[0], end[1]);
      }
    }
  }
}

TEST(ZeroMasterWeights, stage3_with_the_pieces_offloaded_gathers_their_rounding_as_without) {
  // offload_param cpu (here with host parameters): the optimizer steps the f32 host pieces in place
  // and the gathers send their bf16 rounding, kept beside them and rounded again after each step;
  // a stale rounding would gather the last step's values. Bit for bit the run without offload.
  EngineOptions o = withMasterWeights(perLayer(adam()), parallel::Precision::bf16, 3);
  o.zero.reduce_bucket_size = 30;
  const MasterRun plain = trainWithMasterWeights(2, o, 12);
  o.zero.offload_optimizer_cpu = o.zero.offload_param_cpu = true;
  const MasterRun offloaded = trainWithMasterWeights(2, o, 12);
  EXPECT_EQ(offloaded.master, plain.master);
  EXPECT_EQ(offloaded.params[0], plain.params[0]);
  EXPECT_EQ(offloaded.params[1], plain.params[0]);
}

// DeepSpeed casts the module to 16 bits before its optimizer clones the f32 master weights from it
// (EngineOptions::round_initial_parameters, set for its bf16/fp16 sections): every stage starts
// from the initial values rounded; without it (torch_autocast) from the f32 values as built.
TEST(ZeroMasterWeights, the_master_weights_start_at_the_rounded_parameters_as_deepspeeds) {
  std::vector<double> init;
  for (auto& [name, p] : makeNet(7)->namedParameters()) {  // rank 0's, which every rank takes
    for (double v : p.tensor().toVector<double>()) init.push_back(v);
  }
  for (auto precision : {parallel::Precision::bf16, parallel::Precision::fp16}) {
    const DType dt = *parallel::precisionDType(precision);
    std::vector<double> rounded;
    for (double v : init)
      rounded.push_back(Tensor::fromVector<double>({v}, {1}).to(dt).toVector<double>()[0]);
    ASSERT_NE(rounded, init);
    for (bool round : {true, false}) {
      for (int stage : {0, 1, 2, 3}) {
        SCOPED_TRACE(std::string(parallel::precisionName(precision)) + " stage " + std::to_string(stage) +
                     (round ? " rounded" : " as built"));
        EngineOptions o = stage == 0 ? adam() : withMasterWeights(adam(), precision, stage);
        o.precision = precision;
        o.round_initial_parameters = round;
        if (stage == 0) {
          const auto start = train(2, o, 0);
          EXPECT_EQ(start[0], round ? rounded : init);
          EXPECT_EQ(start[1], start[0]);
          continue;
        }
        // Also with the states, and at stage 3 the pieces, on the host (ZeRO-Offload).
        for (int offload : {0, 1, 2}) {
          if (offload == 2 && stage != 3) continue;
          o.zero.offload_optimizer_cpu = offload >= 1;
          o.zero.offload_param_cpu = offload == 2;
          const MasterRun run = trainWithMasterWeights(2, o, 0);
          EXPECT_EQ(run.master, round ? rounded : init) << "the f32 master weights, offload " << offload;
          EXPECT_EQ(run.params[0], rounded)
              << "the 16-bit parameters: rounded either way, offload " << offload;
        }
      }
    }
  }
}

TEST(ZeroMasterWeights, updates_below_the_parameters_rounding_add_up_in_the_master_weights) {
  // SGD with a learning rate so small that no single update moves a bf16 parameter (each is far
  // below half a bf16 step at these magnitudes): the f32 master weights still move as DDP's f32
  // parameters do, and the parameters follow once the sum crosses a rounding step.
  EngineOptions base;
  base.optimizer = {"SGD", {{"lr", 2e-4}}};
  base.precision = parallel::Precision::bf16;
  base.round_initial_parameters = true;
  const int steps = 30;
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    const auto ddp = train(2, base, steps);
    const auto start = train(2, base, 0);
    const MasterRun run =
        trainWithMasterWeights(2, withMasterWeights(base, parallel::Precision::bf16, stage), steps);
    double moved = 0, off = 0;
    for (size_t i = 0; i < run.master.size(); ++i) {
      const double want = ddp[0][i] - start[0][i];
      moved = std::max(moved, std::abs(want));
      off = std::max(off, std::abs((run.master[i] - start[0][i]) - want));
    }
    EXPECT_GT(moved, 1e-4);
    EXPECT_LE(off, 0.05 * moved) << "the master weights moved " << moved << " as DDP's, off by " << off;
  }
}

TEST(ZeroMasterWeights, memory_per_rank_is_deepspeeds_formula) {
  // Psi = 74 parameters, Adam, N = 3 ranks with pieces of 25, 25 and 24 elements (one bucket).
  // DeepSpeed: stage 1 2 Psi + 2 Psi + 12 Psi / N; stage 2 2 Psi + (2 + 12) Psi / N; stage 3
  // (2 + 2 + 12) Psi / N, where lockstep's stage 3 keeps its f32 pieces as the master weights
  // (4 + 2 + 8) Psi / N.
  const int64_t psi = 74;
  for (int stage : {1, 2, 3}) {
    const MasterRun run =
        trainWithMasterWeights(3, withMasterWeights(adam(), parallel::Precision::bf16, stage), 1);
    for (int r = 0; r < 3; ++r) {
      const int64_t piece = r < 2 ? 25 : 24;
      const parallel::ModelStateBytes& m = run.memory[r];
      SCOPED_TRACE("stage " + std::to_string(stage) + " rank " + std::to_string(r));
      EXPECT_EQ(m.parameters, stage == 3 ? 4 * piece : 2 * psi);
      EXPECT_EQ(m.gradients, stage >= 2 ? 2 * piece : 2 * psi);
      EXPECT_EQ(m.optimizer_states, stage == 3 ? 8 * piece : 12 * piece);
    }
  }
}

TEST(ZeroMasterWeights, loaded_f32_values_become_the_master_weights_not_their_rounding) {
  // A resume hands the checkpoint's f32 values to adoptParameters: the master weights take them
  // exactly and the parameters their rounding (from the parameters alone, the master weights would
  // hold the rounding).
  for (int run = 0; run < 4; ++run) {
    const int stage = std::min(run + 1, 3);
    SCOPED_TRACE("stage " + std::to_string(stage) + (run == 3 ? ", pieces offloaded" : ""));
    EngineOptions o = withMasterWeights(sgd(), parallel::Precision::bf16, stage);
    o.zero.offload_optimizer_cpu = o.zero.offload_param_cpu = run == 3;
    Engine engine(makeNet(7), o, parallel::DistributedEnvironment{});
    parallel::ZeroOptimizer& zero = *engine.zero();
    const double exact = 0.30000001192092896;  // an f32 value that bf16 cannot hold
    std::vector<size_t> all(zero.parameters().size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    zero.forEachParameterBucketWhole([&](const std::vector<size_t>& bucket) {
      zero.adoptParameters(bucket, [&](size_t i) { return Tensor::full(zero.parameterShapes()[i], exact); });
    });
    for (const auto& s : zero.ownedSegments()) {
      for (double v : s.values.toVector<double>()) ASSERT_EQ(v, exact);
    }
    parallel::GatheredParameters whole = engine.gatheredParameters();
    const double rounded = Tensor::scalar(exact, DType::f32).to(DType::bf16).itemDouble();
    ASSERT_NE(rounded, exact);
    for (const auto& p : engine.model()->parameters()) {
      for (double v : p.tensor().toVector<double>()) ASSERT_EQ(v, rounded);
    }
  }
}

TEST(ZeroMasterWeights, bf16_master_weights_step_the_bf16_parameters_themselves_at_stages_1_to_3) {
  // One rank: every stage is the plain bf16 model (its parameters rounded once, then stepped by
  // Adam on bf16 parameters and bf16 states under autocast) bit for bit. More ranks: every rank
  // agrees, and the run stays within bf16's rounding of the f32 run (DDP under autocast): each step
  // rounds every parameter to 8 bits of mantissa, so the bound is looser than with f32 master weights.
  EngineOptions base = adam();
  base.precision = parallel::Precision::bf16;
  std::vector<double> plain;
  {
    std::shared_ptr<nn::Module> model = makeNet(7);
    {
      autograd::NoGradGuard ng;
      for (auto& p : model->parameters()) p.tensor() = p.tensor().to(DType::bf16);
    }
    auto opt = std::make_shared<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 0.01});
    Engine engine(model, opt, base, parallel::DistributedEnvironment{});
    for (int s = 0; s < 20;) {
      auto [x, y] = batch(s, kRows);
      engine.backward(autograd::crossEntropy(engine.forward(Variable(x)), y));
      if (engine.step()) ++s;
    }
    plain = flatParams(*engine.model());
  }
  for (int world : {1, 2, 3}) {
    const auto ddp = train(world, base);
    for (int stage : {1, 2, 3}) {
      EngineOptions o = withBf16MasterWeights(base, stage);
      o.zero.reduce_bucket_size = 30;  // pieces straddle parameters
      const MasterRun run = trainWithMasterWeights(world, o, 20);
      SCOPED_TRACE("stage " + std::to_string(stage) + " world " + std::to_string(world));
      for (int r = 0; r < world; ++r) EXPECT_EQ(run.params[r], run.params[0]) << "ranks part ways: " << r;
      // The partition's values are the parameters' own elements, bf16.
      EXPECT_EQ(run.master, run.params[0]);
      const double d = relDiff(run.params[0], ddp[0]);
      EXPECT_LE(d, 4e-2);  // measured 2.1-2.2e-2; not stepping at all would be ~10x that
      if (world == 1) {
        EXPECT_EQ(run.params[0], plain) << "one rank: the plain bf16 model's run";
      }
      std::printf(
          "[ zero ] bf16 master weights in bf16, stage %d world %d: relative difference to DDP %.3g\n", stage,
          world, d);
    }
  }
}

TEST(ZeroMasterWeights, bf16_master_weights_keep_no_f32_copy_and_bf16_states) {
  // Psi = 74 parameters, Adam, N = 3 ranks with pieces of 25, 25 and 24 elements. Stage 1
  // 2 Psi + 2 Psi + 4 Psi / N; stage 2 2 Psi + 6 Psi / N; stage 3 8 Psi / N (DeepSpeed's
  // bf16_master_weights_and_grads with bf16_optimizer_states).
  const int64_t psi = 74;
  for (int stage : {1, 2, 3}) {
    const MasterRun run = trainWithMasterWeights(3, withBf16MasterWeights(adam(), stage), 1);
    for (int r = 0; r < 3; ++r) {
      const int64_t piece = r < 2 ? 25 : 24;
      const parallel::ModelStateBytes& m = run.memory[r];
      SCOPED_TRACE("stage " + std::to_string(stage) + " rank " + std::to_string(r));
      EXPECT_EQ(m.parameters, stage == 3 ? 2 * piece : 2 * psi);
      EXPECT_EQ(m.gradients, stage >= 2 ? 2 * piece : 2 * psi);
      EXPECT_EQ(m.optimizer_states, 4 * piece);
    }
  }
  // The states the optimizer keeps (and a checkpoint saves) are bf16.
  Engine engine(makeNet(7), withBf16MasterWeights(adam(), 2), parallel::DistributedEnvironment{});
  auto [x, y] = batch(0, kRows);
  engine.backward(autograd::crossEntropy(engine.forward(Variable(x)), y));
  ASSERT_TRUE(engine.step());
  EXPECT_FALSE(engine.zero()->masterWeights());
  expectStatesOf(engine.zero()->partitionOptimizerState(), DType::bf16);
  for (const auto& s : engine.zero()->ownedSegments()) EXPECT_EQ(s.values.dtype(), DType::bf16);
}

TEST(ZeroMasterWeights, bf16_master_weights_with_f32_states_keep_them_f32) {
  // DeepSpeed's bf16 master weights beside DeepSpeedCPUAdam's f32 states (fp32_optimizer_states;
  // ZeRO-Offload's mode): 2 + 2 bytes per parameter and 8 per partition element of Adam's states,
  // which stay f32 in the partition, the consolidated state dict (a checkpoint) and a reload.
  EngineOptions base;
  base.optimizer = {"Adam", {{"lr", 0.01}, {"fp32_optimizer_states", true}}};
  base.precision = parallel::Precision::bf16;
  const auto ddp = train(3, base);
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    const MasterRun run = trainWithMasterWeights(3, withBf16MasterWeights(base, stage), 20);
    for (int r = 0; r < 3; ++r) EXPECT_EQ(run.memory[r].optimizer_states, 8 * (r < 2 ? 25 : 24));
    EXPECT_LE(relDiff(run.params[0], ddp[0]), 4e-2);
  }
  Engine engine(makeNet(7), withBf16MasterWeights(base, 2), parallel::DistributedEnvironment{});
  auto [x, y] = batch(0, kRows);
  engine.backward(autograd::crossEntropy(engine.forward(Variable(x)), y));
  ASSERT_TRUE(engine.step());
  const optim::OptimizerStateDict whole = engine.zero()->consolidatedStateDict();
  expectStatesOf(whole, DType::f32);
  engine.zero()->loadConsolidatedStateDict(whole);
  expectStatesOf(engine.zero()->partitionOptimizerState(), DType::f32);
}

TEST(ZeroMasterWeights, bf16_master_weights_lose_updates_below_the_parameters_rounding) {
  // The price of no f32 copy (DeepSpeed's too): SGD updates far below half a bf16 step at these
  // magnitudes move f32 master weights (the test above) but round away on bf16 ones, every step.
  EngineOptions base;
  base.optimizer = {"SGD", {{"lr", 2e-4}}};
  base.precision = parallel::Precision::bf16;
  const auto start = train(2, base, 0);
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    const MasterRun f32_master =
        trainWithMasterWeights(2, withMasterWeights(base, parallel::Precision::bf16, stage), 30);
    const MasterRun bf16_master = trainWithMasterWeights(2, withBf16MasterWeights(base, stage), 30);
    std::vector<double> rounded_start;
    for (double v : start[0])
      rounded_start.push_back(Tensor::scalar(v, DType::f32).to(DType::bf16).itemDouble());
    EXPECT_NE(f32_master.params[0], rounded_start) << "f32 master weights add the updates up";
    EXPECT_EQ(bf16_master.params[0], rounded_start) << "bf16 ones round each of them away";
  }
}

TEST(ZeroMasterWeights, refusals_name_the_option) {
  EngineOptions o = withMasterWeights(adam(), parallel::Precision::bf16, 2);
  o.precision = parallel::Precision::fp32;
  try {
    parallel::validateEngineOptions(o);
    FAIL() << "param_dtype without the matching precision was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("param_dtype bf16"), std::string::npos) << e.what();
  }
  parallel::ZeroOptions z;
  z.stage = 2;
  z.param_dtype = DType::f32;
  EXPECT_THROW(parallel::validateZeroOptions(z), ValueError);
  z.param_dtype.reset();
  z.master_weights_in_param_dtype = true;
  try {
    parallel::validateZeroOptions(z);
    FAIL() << "master_weights_in_param_dtype without param_dtype was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("needs param_dtype"), std::string::npos) << e.what();
  }
  z.master_weights_in_param_dtype = false;
  z.param_dtype = DType::bf16;
  z.offload_optimizer.nvme_path = "/tmp";
  try {
    parallel::validateZeroOptions(z);
    FAIL() << "param_dtype with NVMe offload was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("NVMe"), std::string::npos) << e.what();
  }
}

// ZeroOptions::fused_host_step: where the partition is stepped on the host in f32 by Adam, the
// clipping coefficient goes into the update and the master weights are rounded into their 16-bit
// parameters (ZeRO-Offload's staging, offload_param's rounded pieces) as they are stepped, and
// bf16's non-finite check is the norm's. Bit for bit the separate passes, at every stage and
// offload, every step clipping, and at stages 1 and 2 a NaN on rank 1 at the third step (skipped
// alike).
TEST(ZeroMasterWeights, the_fused_host_step_is_bitwise_the_separate_passes) {
  struct Case {
    int stage;
    bool offload_optimizer, offload_param;
  };
  for (const Case c : {Case{1, false, false}, Case{2, false, false}, Case{3, false, false},
                       Case{2, true, false}, Case{3, true, true}}) {
    SCOPED_TRACE("stage " + std::to_string(c.stage) + (c.offload_optimizer ? " offload_optimizer" : "") +
                 (c.offload_param ? " offload_param" : ""));
    EngineOptions o = withMasterWeights(perLayer(adam()), parallel::Precision::bf16, c.stage);
    o.zero.reduce_bucket_size = 30;
    o.zero.offload_step_chunk = 40;  // several runs of shards per offloaded step
    o.gradient_clipping = 0.05;
    o.skip_nonfinite_steps = c.stage < 3;
    o.zero.offload_optimizer_cpu = c.offload_optimizer;
    o.zero.offload_param_cpu = c.offload_param;
    std::vector<std::vector<double>> params[2];
    int64_t skipped[2][2] = {};
    for (bool fused : {true, false}) {
      o.zero.fused_host_step = fused;
      params[fused].resize(2);
      lockstep::testing::runThreadRanks(2, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
        Engine engine(makeNet(7 + rank), o, worldOf(rank, 2, pg));
        EXPECT_EQ(engine.zero()->fusesHostStep(), fused);
        for (int s = 0; s < 6; ++s) {
          auto [x, y] = batch(s * 2 + rank, kRows);
          if (s == 2 && rank == 1 && o.skip_nonfinite_steps) x.data<float>()[0] = std::nanf("");
          engine.backward(autograd::crossEntropy(engine.forward(Variable(x)), y));
          engine.step();
        }
        skipped[fused][rank] = engine.skippedSteps();
        engine.zero()->gatherParameters();
        params[fused][rank] = flatParams(*engine.model());
      });
    }
    EXPECT_EQ(params[1][0], params[0][0]);
    EXPECT_EQ(params[1][1], params[0][1]);
    EXPECT_EQ(skipped[1][0], skipped[0][0]);
    if (o.skip_nonfinite_steps) {
      EXPECT_EQ(skipped[1][0], 1);
      EXPECT_FALSE(
          std::any_of(params[1][0].begin(), params[1][0].end(), [](double v) { return std::isnan(v); }));
    }
  }
}
