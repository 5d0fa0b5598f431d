// ZeRO stages 1, 2 and 3 through the training engine: after 20 steps every rank holds the
// parameters DDP reaches on the same data, at world sizes 1-4, on a model of 74 parameters
// (divisible by neither 3 nor 4), with SGD+momentum and Adam; also with gradient accumulation,
// clipping and a loss scaler, and with buckets small enough that pieces straddle parameters.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <mutex>

#include "lockstep/autograd.h"
#include "lockstep/nn.h"
#include "lockstep/optim.h"
#include "lockstep/parallel.h"
#include "parallel/thread_ranks.h"
#include "parallel/zero_engine_helpers.h"

using namespace lockstep;
using namespace lockstep::testing::zero;

TEST(Zero, stage1_matches_ddp_with_sgd_momentum_and_adam_at_world_1_to_4) {
  for (int world = 1; world <= 4; ++world) {
    expectSameAsDdp(sgd(), world, 1, "SGD");
    expectSameAsDdp(adam(), world, 1, "Adam");
  }
}

TEST(Zero, stage2_matches_ddp_with_sgd_momentum_and_adam_at_world_1_to_4) {
  for (int world = 1; world <= 4; ++world) {
    expectSameAsDdp(sgd(), world, 2, "SGD");
    expectSameAsDdp(adam(), world, 2, "Adam");
  }
}

TEST(Zero, stage3_matches_ddp_with_sgd_momentum_and_adam_at_world_1_to_4) {
  for (int world = 1; world <= 4; ++world) {
    expectSameAsDdp(sgd(), world, 3, "SGD");  // DeepSpeed's defaults: small parameters persist
    expectSameAsDdp(adam(), world, 3, "Adam");
    expectSameAsDdp(perLayer(sgd()), world, 3, "SGD, gathered per layer");
    expectSameAsDdp(perLayer(adam()), world, 3, "Adam, gathered per layer");
  }
}

// How many of params hold their bytes (ZeRO-3 frees a parameter's storage when it is released).
static int residentCount(const std::vector<autograd::Variable>& params) {
  int n = 0;
  for (const auto& p : params) n += p.tensor().storage()->resident();
  return n;
}

TEST(Zero, stage3_keeps_only_its_partition_between_steps) {
  lockstep::testing::runThreadRanks(3, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    EngineOptions o = perLayer(adam());
    o.zero_stage = 3;
    Engine engine(makeNet(1), o, worldOf(rank, 3, pg));
    auto params = engine.model()->parameters();
    auto resident = [&] { return residentCount(params); };
    EXPECT_FALSE(engine.zero()->parametersGathered());
    EXPECT_EQ(resident(), 0);                       // released: every parameter's bytes are freed
    EXPECT_EQ(params[0].shape(), (Shape{9, kIn}));  // its shape stays
    EXPECT_THROW(params[0].tensor().toVector<float>(), ValueError);
    auto [x, y] = batch(rank, kRows);
    Variable out = engine.forward(Variable(x));
    EXPECT_EQ(resident(), 0);  // each layer was freed again after its forward
    engine.backward(autograd::crossEntropy(out, y));
    EXPECT_EQ(resident(), 0);
    EXPECT_TRUE(engine.step());
    engine.zero()->gatherParameters();  // all of them, for a state dict
    EXPECT_EQ(resident(), 4);
    EXPECT_TRUE(engine.zero()->parametersGathered());
    engine.zero()->releaseParameters();
    EXPECT_EQ(resident(), 0);
  });
}

TEST(Zero, engine_holds_stage3_parameters_whole_for_a_scope_and_evaluates_layer_by_layer) {
  // What the trainer uses instead of ZeroOptimizer calls: gatheredParameters() (a checkpoint's
  // values loaded into the whole parameters go into each rank's partition with adoptChanges())
  // and evaluate(), which runs forwards as training does, one layer gathered at a time.
  lockstep::testing::runThreadRanks(3, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    EngineOptions o = perLayer(adam());
    o.zero_stage = 3;
    Engine engine(makeNet(1), o, worldOf(rank, 3, pg));
    auto params = engine.model()->parameters();
    auto resident = [&] { return residentCount(params); };
    EXPECT_FALSE(engine.parametersWhole());
    {
      parallel::GatheredParameters whole = engine.gatheredParameters();
      EXPECT_TRUE(engine.parametersWhole());
      EXPECT_EQ(resident(), 4);
      params[0].tensor().fill(0.25);  // as a loaded checkpoint would
      whole.adoptChanges();
    }
    EXPECT_FALSE(engine.parametersWhole());
    EXPECT_EQ(resident(), 0);
    auto [x, y] = batch(rank, kRows);
    std::vector<float> expected;
    {
      parallel::GatheredParameters whole = engine.gatheredParameters();
      for (float v : params[0].tensor().toVector<float>())
        EXPECT_EQ(v, 0.25f) << "the partition kept the change";
      expected = engine.module()->forward(Variable(x)).tensor().toVector<float>();
    }
    std::vector<float> evaluated;
    engine.evaluate([&] {
      evaluated = engine.module()->forward(Variable(x)).tensor().toVector<float>();
      EXPECT_EQ(resident(), 0) << "each layer was freed after its forward";
    });
    EXPECT_EQ(evaluated, expected);
    EXPECT_FALSE(engine.parametersWhole());
  });
}

TEST(Zero, stage3_walks_its_parameters_one_bucket_at_a_time_never_whole) {
  // forEachParameterBucketWhole (the final model file's source): every parameter once, whole and
  // with the values gatherParameters() gives, while the others of the model stay freed.
  lockstep::testing::runThreadRanks(3, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    EngineOptions o = perLayer(adam());
    o.zero_stage = 3;
    o.zero.reduce_bucket_size = 20;  // a bucket per layer or less
    Generator g(1);
    nn::ModelOptions m;
    m.in_features = kIn;
    m.out_features = kClasses;
    m.hidden = {7, 6, 8, 5, 7};  // six Linear layers, twelve parameters
    m.generator = &g;
    Engine engine(nn::makeModel("mlp", m), o, worldOf(rank, 3, pg));
    auto [x, y] = batch(rank, kRows);
    engine.backward(autograd::crossEntropy(engine.forward(Variable(x)), y));
    ASSERT_TRUE(engine.step());
    const auto& params = engine.zero()->parameters();
    std::vector<int> seen(params.size(), 0);
    std::vector<std::vector<float>> walked(params.size());
    int calls = 0;
    engine.zero()->forEachParameterBucketWhole([&](const std::vector<size_t>& indices) {
      ++calls;
      size_t resident = 0;
      for (const auto& p : params) resident += p.tensor().storage()->resident();
      EXPECT_LE(resident, params.size() / 2) << "more than two buckets were resident";
      for (size_t i : indices) {
        ++seen[i];
        walked[i] = params[i].tensor().contiguous().toVector<float>();
      }
    });
    EXPECT_GT(calls, 1);
    for (size_t i = 0; i < params.size(); ++i) EXPECT_EQ(seen[i], 1) << "parameter " << i;
    for (const auto& p : params) EXPECT_FALSE(p.tensor().storage()->resident()) << "freed after the walk";
    engine.zero()->gatherParameters();
    for (size_t i = 0; i < params.size(); ++i)
      EXPECT_EQ(walked[i], params[i].tensor().contiguous().toVector<float>()) << "parameter " << i;
    engine.zero()->releaseParameters();
  });
}

TEST(Zero, stage3_gathers_one_layer_at_a_time_in_forward_and_backward) {
  // Six Linear layers of a Sequential are the gather units: while one runs forward, or backward, at
  // most it, the one before (whose gradients are on their way) and the prefetched one hold whole
  // parameters; the model still trains as DDP.
  auto net = makeDeepNet;
  for (auto [world, prefetch] : {std::pair{1, 0}, {2, 0}, {2, 1}, {3, 1}}) {
    lockstep::testing::runThreadRanks(world, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
      EngineOptions o = perLayer(sgd());
      o.zero_stage = 3;
      o.zero.prefetch_bucket_size = prefetch;  // 1: the next layer only
      Engine engine(net(3), o, worldOf(rank, world, pg));
      std::vector<nn::Module*> linears;
      for (nn::Module* m : engine.model()->layers()) {
        if (!m->parameters().empty()) linears.push_back(m);
      }
      ASSERT_EQ(linears.size(), 6u);
      auto whole_layers = [&] {
        int n = 0;
        for (nn::Module* m : linears) n += m->parameters()[0].tensor().storage()->resident();
        return n;
      };
      int max_forward = 0, max_backward = 0, seen_forward = 0;
      for (size_t i = 0; i < linears.size(); ++i) {
        linears[i]->registerForwardHooks(
            [&, i](nn::Module& m) {  // runs after ZeRO's pre-hook: this layer is whole
              EXPECT_TRUE(m.parameters()[0].tensor().storage()->resident()) << "layer " << i;
              max_forward = std::max(max_forward, whole_layers());
              ++seen_forward;
            },
            {});
        linears[i]->parameters()[0].registerGradReadyHook(
            [&](Variable&) { max_backward = std::max(max_backward, whole_layers()); });
      }
      auto [x, y] = batch(rank, kRows);
      engine.backward(autograd::crossEntropy(engine.forward(Variable(x)), y));
      engine.step();
      EXPECT_EQ(seen_forward, 6);
      // This layer, and the next one being all-gathered straight into its parameters.
      EXPECT_EQ(max_forward, 1 + prefetch) << "world " << world;
      EXPECT_GE(max_backward, 1);
      EXPECT_LE(max_backward, 2 + prefetch) << "world " << world;
      EXPECT_EQ(whole_layers(), 0);
    });
  }
  EngineOptions o = perLayer(adam());
  o.zero.reduce_bucket_size = 30;  // units split into several buckets, pieces straddling parameters
  expectSameAsDdp(o, 3, 3, "Adam, stage 3 over six layers");
}

TEST(Zero, small_buckets_split_parameters_across_ranks_and_still_match) {
  // 20-element buckets (two of them) and all-gathers of 3 elements per rank at a time.
  for (int stage : {1, 2, 3}) {
    for (int world : {3, 4}) {
      EngineOptions o = adam();
      o.zero.reduce_bucket_size = 20;
      o.zero.allgather_bucket_size = 3 * world;
      expectSameAsDdp(o, world, stage, "Adam, small buckets");
    }
  }
}

TEST(Zero, accumulation_clipping_and_loss_scaling_match_ddp) {
  EngineOptions o = sgd();
  o.gradient_accumulation_steps = 3;
  o.gradient_clipping = 0.05;
  o.loss_scaler = optim::LossScalerOptions{};
  o.loss_scaler->initial_scale_power = 8;
  o.zero.reduce_bucket_size = 20;
  for (int stage : {1, 2, 3}) {
    for (int world : {2, 3}) expectSameAsDdp(o, world, stage, "SGD, accumulation 3 + clipping + loss scale");
  }
  expectSameAsDdp(perLayer(o), 3, 3, "SGD, accumulation 3 + clipping + loss scale, per layer");
}

TEST(Zero, memory_report_follows_the_formulas) {
  // Psi = 74 f32 parameters, Adam (2 states), N = 3 ranks of pieces 25, 25, 24 (one bucket).
  const int64_t psi = 74;
  for (int stage : {0, 1, 2, 3}) {
    std::vector<parallel::ModelStateBytes> mem(3);
    lockstep::testing::runThreadRanks(3, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
      EngineOptions o = adam();
      o.zero_stage = stage;
      Engine engine(makeNet(1), o, worldOf(rank, 3, pg));
      auto all = parallel::gatherModelStateBytes(pg.get(), engine.memory());
      if (rank == 0) mem = all;
    });
    int64_t states = 0, grads = 0;
    int64_t params = 0;
    for (int r = 0; r < 3; ++r) {
      states += mem[r].optimizer_states;
      grads += mem[r].gradients;
      params += mem[r].parameters;
      const int64_t piece = r < 2 ? 25 : 24;
      EXPECT_EQ(mem[r].parameters, stage == 3 ? 4 * piece : 4 * psi) << "stage " << stage;
      EXPECT_EQ(mem[r].optimizer_states, stage == 0 ? 8 * psi : 8 * piece) << "stage " << stage;
      EXPECT_EQ(mem[r].gradients, stage >= 2 ? 4 * piece : 4 * psi) << "stage " << stage;
    }
    if (stage == 3) {
      EXPECT_EQ(params, 4 * psi);  // every parameter element on exactly one rank
    }
    if (stage > 0) {
      EXPECT_EQ(states, 8 * psi);  // every state element on exactly one rank
    }
    if (stage >= 2) {
      EXPECT_EQ(grads, 4 * psi);
    }
  }
}

TEST(Zero, rejects_stage_4_and_bad_options_naming_the_field) {
  EngineOptions o = adam();
  o.zero_stage = 4;
  try {
    parallel::validateEngineOptions(o);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("ZeRO stage 4 does not exist"), std::string::npos) << e.what();
  }
  o.zero_stage = 3;
  EXPECT_NO_THROW(parallel::validateEngineOptions(o));
  o.zero_stage = 2;
  o.zero.reduce_bucket_size = 0;
  EXPECT_THROW(parallel::validateEngineOptions(o), ValueError);
  o.zero.reduce_bucket_size = 100;
  o.ddp.comm_hook = "fp16_compress";  // DDP's options would do nothing at stage 2
  try {
    parallel::validateEngineOptions(o);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("ddp.comm_hook does not apply to ZeRO stages 2 and 3"),
              std::string::npos)
        << e.what();
  }
  o.zero_stage = 1;  // stage 1 averages through DDP, hooks included
  EXPECT_NO_THROW(parallel::validateEngineOptions(o));
}

TEST(Zero, stage2_names_a_parameter_that_got_no_gradient) {
  EngineOptions o = sgd();
  o.zero_stage = 2;
  Engine engine(makeNet(1), o, worldOf(0, 1, nullptr));
  // A loss that reaches the first weight only.
  auto params = engine.model()->parameters();
  Variable loss = autograd::sum(params[0] * params[0]);
  engine.backward(loss);
  try {
    engine.step();
    FAIL() << "expected an error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("received none"), std::string::npos) << e.what();
  }
}

TEST(Zero, deepspeed_variants_overlap_off_allreduce_and_broadcasts_match_ddp) {
  // overlap_comm: false, reduce_scatter: false (allreduce + keep the piece), allgather_partitions:
  // false (one broadcast per rank).
  EngineOptions o = adam();
  o.zero.reduce_bucket_size = 20;
  o.zero.overlap_comm = false;
  o.zero.reduce_scatter = false;
  o.zero.allgather_partitions = false;
  for (int world : {2, 3}) {
    expectSameAsDdp(o, world, 2, "Adam, no overlap, allreduce, broadcasts");
    expectSameAsDdp(perLayer(o), world, 3, "Adam, no overlap, allreduce, broadcasts, per layer");
  }
}

namespace {

struct Snapshot {
  nn::StateDict model;
  optim::OptimizerStateDict state;
};

// Steps [from, to) of a job whose global batch is always the same 12 rows, split over `world` ranks
// (so that any world size trains the same model); starts from `start` when given.
Snapshot trainGlobal(int world, const EngineOptions& o, int from, int to, const Snapshot* start) {
  Snapshot out;
  lockstep::testing::runThreadRanks(world, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    Engine engine(makeNet(7), o, worldOf(rank, world, pg));
    if (start) {
      if (engine.zero()) engine.zero()->gatherParameters();  // stage 3: whole parameters to load into
      engine.model()->loadStateDict(start->model);
      if (engine.zero()) engine.zero()->adoptGatheredParameters();
      if (engine.zero()) {
        engine.zero()->loadConsolidatedStateDict(start->state);
      } else {
        engine.optimizer()->loadStateDict(start->state);
      }
    }
    const int64_t rows = 12 / world;
    for (int s = from; s < to; ++s) {
      auto [x, y] = batch(s, 12);
      engine.backward(
          autograd::crossEntropy(engine.forward(Variable(x.slice(rank * rows, (rank + 1) * rows))),
                                 y.slice(rank * rows, (rank + 1) * rows)));
      EXPECT_TRUE(engine.step());
    }
    optim::OptimizerStateDict state =
        engine.zero() ? engine.zero()->consolidatedStateDict() : engine.optimizer()->stateDict();
    if (engine.zero()) engine.zero()->gatherParameters();
    if (rank == 0) {
      out.model = engine.model()->stateDict().cloned();
      out.state.state = state.state.cloned();
      out.state.param_groups = state.param_groups;
    }
  });
  return out;
}

double relDiff(const nn::StateDict& a, const nn::StateDict& b) {
  double d = 0, m = 0;
  EXPECT_EQ(a.size(), b.size());
  for (const auto& [name, t] : b) {
    auto va = a.at(name).toVector<double>(), vb = t.toVector<double>();
    for (size_t i = 0; i < va.size(); ++i) {
      d = std::max(d, std::abs(va[i] - vb[i]));
      m = std::max(m, std::abs(vb[i]));
    }
  }
  return d / m;
}

}  // namespace

TEST(Zero, consolidated_state_is_ddps_and_reshards_across_world_sizes_and_stages) {
  const EngineOptions ddp = adam();
  EngineOptions z2 = adam(), z1 = adam();
  z2.zero_stage = 2;
  z2.zero.reduce_bucket_size = 20;
  z1.zero_stage = 1;
  // Uninterrupted: DDP on 2 ranks for 20 steps.
  Snapshot straight = trainGlobal(2, ddp, 0, 20, nullptr);
  // Stage 2 on 2 ranks for 10 steps: its consolidated state is DDP's (keys, shapes, values).
  Snapshot half_ddp = trainGlobal(2, ddp, 0, 10, nullptr);
  Snapshot half = trainGlobal(2, z2, 0, 10, nullptr);
  auto sortedKeys = [](const nn::StateDict& d) {
    auto k = d.keys();
    std::sort(k.begin(), k.end());
    return k;
  };
  EXPECT_EQ(sortedKeys(half.state.state), sortedKeys(half_ddp.state.state));
  EXPECT_LE(relDiff(half.state.state, half_ddp.state.state), 1e-6);
  // ... resumed on 3 ranks with stage 1, on 4 with stage 2, and by DDP on 1 rank.
  Snapshot three = trainGlobal(3, z1, 10, 20, &half);
  EXPECT_LE(relDiff(three.model, straight.model), 1e-6);
  Snapshot four = trainGlobal(4, z2, 10, 20, &half);
  EXPECT_LE(relDiff(four.model, straight.model), 1e-6);
  Snapshot one = trainGlobal(1, ddp, 10, 20, &half);
  EXPECT_LE(relDiff(one.model, straight.model), 1e-6);
  // A DDP checkpoint resumed by ZeRO stage 2 on 3 ranks.
  Snapshot from_ddp = trainGlobal(3, z2, 10, 20, &half_ddp);
  EXPECT_LE(relDiff(from_ddp.model, straight.model), 1e-6);
  // Stage 3: its consolidated state is DDP's too; resumed on 3 ranks by DDP, and a DDP checkpoint
  // resumed by stage 3 on 3 ranks.
  EngineOptions z3 = z2;
  z3.zero_stage = 3;
  Snapshot half3 = trainGlobal(2, z3, 0, 10, nullptr);
  EXPECT_LE(relDiff(half3.state.state, half_ddp.state.state), 1e-6);
  EXPECT_LE(relDiff(half3.model, half_ddp.model), 1e-6);
  Snapshot three_ddp = trainGlobal(3, ddp, 10, 20, &half3);
  EXPECT_LE(relDiff(three_ddp.model, straight.model), 1e-6);
  Snapshot three_z3 = trainGlobal(3, z3, 10, 20, &half_ddp);
  EXPECT_LE(relDiff(three_z3.model, straight.model), 1e-6);
}

TEST(Zero, mixed_precision_matches_ddp) {
  // Autocast keeps f32 parameters, gradients and states: ZeRO partitions them as in fp32. fp16
  // brings DeepSpeed's dynamic loss scaler (overflow steps skipped on every rank alike).
  for (const char* precision : {"bf16", "fp16"}) {
    EngineOptions o = adam();
    o.precision = parallel::parsePrecision(precision);
    for (int stage : {1, 2, 3}) expectSameAsDdp(o, 2, stage, precision);
  }
}

TEST(Zero, offload_optimizer_cpu_steps_host_copies_and_matches_ddp) {
  // ZeRO-Offload's path (a GPU run's `offload_optimizer: {device: cpu}`: the optimizer steps host
  // copies of the partition, the gradients copied in before the step and the values back after it),
  // here with host parameters: the copies must change nothing. Stage 3 also with offload_param cpu
  // (the optimizer steps the coordinator's host pieces themselves, the gradients copied in). The
  // host step goes a run of shards at a time (offload_step_chunk elements): one run per shard in
  // half the runs, one for all in the others.
  for (int run = 0; run < 4; ++run) {
    const int stage = std::min(run + 1, 3);
    EngineOptions o = run >= 2 ? perLayer(adam()) : adam();
    o.zero.offload_optimizer_cpu = true;
    o.zero.offload_param_cpu = run == 3;
    o.zero.offload_step_chunk = run % 2 == 0 ? 1 : int64_t{1} << 22;
    o.zero.reduce_bucket_size = 20;
    o.zero.allgather_bucket_size = 9;
    const std::string adam_what = run == 3 ? "Adam, ZeRO-Offload with the parameters' pieces on the host"
                                           : "Adam, ZeRO-Offload's host copies";
    for (int world : {1, 2, 3}) expectSameAsDdp(o, world, stage, adam_what.c_str());
    EngineOptions s = sgd();
    s.zero.offload_optimizer_cpu = true;
    s.zero.offload_param_cpu = run == 3;
    s.zero.offload_step_chunk = run % 2 == 0 ? 1 : 40;
    s.gradient_accumulation_steps = 3;
    s.gradient_clipping = 0.05;  // clipped and unscaled on the host copies, copied once per step
    s.loss_scaler = optim::LossScalerOptions{};
    s.loss_scaler->initial_scale_power = 8;
    expectSameAsDdp(s, 2, stage, "SGD, ZeRO-Offload, accumulation 3 + clipping + loss scale");
  }
}

TEST(Zero, offload_optimizer_cpu_adopts_loaded_parameters_into_its_host_copies) {
  // A resumed run loads the parameters; the engine's adoptChanges() (RunCheckpoints::resume) copies
  // them into the host copies the optimizer steps, which would otherwise hold the old values. At
  // stage 3 the pieces the next forward gathers must hold them too (and with offload_param cpu the
  // host pieces are the values stepped).
  for (int run = 0; run < 3; ++run) {
    EngineOptions o = sgd();
    o.zero_stage = run == 0 ? 2 : 3;
    o.zero.offload_optimizer_cpu = true;
    o.zero.offload_param_cpu = run == 2;
    SCOPED_TRACE("stage " + std::to_string(o.zero_stage) + (run == 2 ? " offload_param" : ""));
    Engine engine(makeNet(7), o, DistributedEnvironment{});
    auto held = [&] {
      double lo = 1e9, hi = -1e9;
      for (const auto& s : engine.zero()->ownedSegments()) {
        for (double v : s.values.toVector<double>()) {
          lo = std::min(lo, v);
          hi = std::max(hi, v);
        }
      }
      return std::pair{lo, hi};
    };
    {
      parallel::GatheredParameters whole = engine.gatheredParameters();
      for (auto& p : engine.model()->parameters()) p.tensor().fill(0.5);
      EXPECT_NE(held(), std::pair(0.5, 0.5));  // still the values the model was built with
      whole.adoptChanges();
      EXPECT_EQ(held(), std::pair(0.5, 0.5));
    }
    // Gathered again from the partition (stage 3: the parameters were freed meanwhile).
    parallel::GatheredParameters again = engine.gatheredParameters();
    for (auto& p : engine.model()->parameters()) {
      for (double v : p.tensor().toVector<double>()) ASSERT_EQ(v, 0.5);
    }
  }
}

namespace {

// Four equal Linear layers whose forward runs them in another order than layers() lists them
// (c, a, d, b): the layers' order predicts the wrong next layer, the recorded order the right one.
class Shuffled final : public nn::Module {
 public:
  explicit Shuffled(uint64_t seed) : nn::Module("Shuffled") {
    Generator g(seed);
    for (const char* name : {"a", "b", "c", "d"}) {
      layers_.push_back(std::make_shared<nn::Linear>(nn::LinearOptions{6, 6, true, &g}));
      registerModule(name, layers_.back());
    }
  }
  Variable forward(const Variable& x) override {
    Variable h = x;
    for (int i : {2, 0, 3, 1}) h = autograd::relu((*layers_[static_cast<size_t>(i)])(h));
    return h;
  }
  std::vector<nn::Module*> layers() override {
    std::vector<nn::Module*> out;
    for (const auto& l : layers_) out.push_back(l.get());
    return out;
  }

 private:
  std::vector<std::shared_ptr<nn::Linear>> layers_;
};

}  // namespace

TEST(Zero, stage3_prefetches_by_the_recorded_execution_order) {
  // Step 1 prefetches by the layers' order (c's forward fetches d, which comes third): most gathers
  // wait. From step 2 on the recorded order says what comes next: every gather but the forward's
  // first and the backward's first (released after its forward: no reuse) finds its layer fetched.
  lockstep::testing::runThreadRanks(2, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    EngineOptions o = perLayer(sgd());
    o.zero_stage = 3;
    o.zero.prefetch_bucket_size = 1;  // the next layer only
    Engine engine(std::make_shared<Shuffled>(5), o, worldOf(rank, 2, pg));
    std::vector<parallel::ZeroParameterCoordinator::FetchStats> after;
    for (int step = 0; step < 3; ++step) {
      Tensor x = Tensor::empty({4, 6});
      Generator(40 + step * 2 + rank).uniform(x, -1, 1);
      Variable out = engine.forward(Variable(x));
      engine.backward(autograd::sum(out * out));
      engine.step();
      after.push_back(engine.zero()->coordinator()->fetchStats());
    }
    const int64_t per_step = after[0].unit_gathers;
    EXPECT_EQ(per_step, 8);  // four forwards, four backwards
    const int64_t first_ready = after[0].ready;
    for (int step = 1; step < 3; ++step) {
      EXPECT_EQ(after[step].unit_gathers - after[step - 1].unit_gathers, per_step);
      EXPECT_EQ(after[step].ready - after[step - 1].ready, per_step - 2) << "step " << step;
    }
    EXPECT_LT(first_ready, per_step - 2);
    if (rank == 0)
      std::printf(
          "[ zero ] stage 3, layers run out of their listed order: %lld of %lld gathers found their layer "
          "fetched in step 1 (the layers' order), %lld in step 2 (the recorded order)\n",
          static_cast<long long>(first_ready), static_cast<long long>(per_step),
          static_cast<long long>(after[1].ready - after[0].ready));
  });
}

// Stages 2 and 3 have no DDP wrapper: their training forwards take rank 0's buffers, and before an
// evaluation syncBuffersForEvaluation() does too, so that every rank evaluates the model rank 0
// saves (each rank's BatchNorm statistics, updated by its own last forward, describe none).
TEST(Zero, evaluation_buffers_are_rank_0s_at_stages_2_and_3) {
  for (int stage : {2, 3}) {
    lockstep::testing::runThreadRanks(2, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
      EngineOptions o = sgd();
      o.zero_stage = stage;
      auto bn = std::make_shared<nn::BatchNorm2d>(nn::BatchNorm2dOptions{.num_features = 3});
      Engine engine(bn, o, worldOf(rank, 2, pg));
      for (auto& [name, t] : bn->namedBuffers())
        if (t.dtype() == DType::f32) t.fill(static_cast<double>(rank + 1));  // the ranks' own statistics
      engine.syncBuffersForEvaluation();
      for (auto& [name, t] : bn->namedBuffers()) {
        if (t.dtype() != DType::f32) continue;
        EXPECT_EQ(t.toVector<float>(), std::vector<float>(3, 1.0f))
            << "stage " << stage << " rank " << rank << " " << name;
      }
    });
  }
}
