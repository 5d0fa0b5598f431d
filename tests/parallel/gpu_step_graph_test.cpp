// A training step replayed as a CUDA graph computes bit for bit what the eager step computes, for
// the configurations `cuda_graph: auto` replays: Adam and AdamW (bias corrections from the host's
// step counts), LR schedules (a different rate every step), gradient clipping, SGD with Nesterov
// momentum and weight decay, dropout (nn::Dropout's own generators, the language models' default
// generator, attention's dropout, checkpointed blocks that redraw it), BatchNorm (ResNet-18). Each
// run trains one engine eagerly and a second, built alike from the same seeds, through a StepGraph;
// an epoch's smaller batch runs eagerly between the replays. Losses, learning rates, parameters,
// buffers, optimizer state and generator offsets must be equal, not close: a value baked into the
// graph (a rate, a bias correction, a Philox offset) would repeat and part the runs. Runs with
// ctest -L gpu; skips without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "common/gpu.h"
#include "lockstep/autograd.h"
#include "lockstep/kernels/graph_capture.h"
#include "lockstep/nn.h"
#include "lockstep/parallel.h"
#include "lockstep/tensor/cuda/runtime.h"

using namespace lockstep;
using autograd::Variable;

namespace {

const Device kGpu = Device::cuda(0);
constexpr int kSteps = 10, kWarmup = 2, kSmallStep = 5;
constexpr int64_t kRows = 16, kSmallRows = 5;

struct Setup {
  std::function<std::shared_ptr<nn::Module>()> make;  // built on the host after manualSeed
  parallel::EngineOptions options;
  std::function<std::pair<Tensor, Tensor>(int step, int64_t rows)> batch;  // host tensors
  // One step's loss through the engine (its forward included), eager or captured.
  std::function<Variable(parallel::Engine&, const Tensor& x, const Tensor& y)> loss;
};

struct Outcome {
  std::vector<double> losses, lrs;
  std::vector<std::pair<std::string, std::vector<double>>> state;  // parameters, buffers, optimizer
  std::vector<uint64_t> offsets;                                   // every dropout generator's
  int64_t replays = 0, global_steps = 0;
  std::string eager_because;  // StepGraph::eagerBecause()
};

void dropoutOffsets(nn::Module& m, std::vector<uint64_t>& out) {
  if (auto* d = dynamic_cast<nn::Dropout*>(&m)) out.push_back(d->generator().offset());
  for (const auto& c : m.children()) dropoutOffsets(*c, out);
}

Outcome train(const Setup& s, bool graphed, int small_step,
              parallel::OnCaptureFailure on_failure = parallel::OnCaptureFailure::raise) {
  manualSeed(1234);  // the dropout modules' seeds and the default generator's draws
  auto model = s.make();
  model->to(kGpu);
  model->train();
  parallel::Engine engine(model, s.options, parallel::DistributedEnvironment{});
  std::unique_ptr<parallel::StepGraph> graph;
  if (graphed) {
    EXPECT_EQ(parallel::stepGraphBlocker(engine), "");
    graph = std::make_unique<parallel::StepGraph>(
        engine, [&](const Tensor& x, const Tensor& y) { return s.loss(engine, x, y); }, kWarmup, on_failure);
  }
  Outcome o;
  for (int step = 0; step < kSteps; ++step) {
    auto [x, y] = s.batch(step, step == small_step ? kSmallRows : kRows);
    x = x.to(kGpu);
    y = y.to(kGpu);
    Tensor loss;
    if (graph) {
      loss = graph->step(x, y);
    } else {
      Variable l = s.loss(engine, x, y);
      engine.backward(l);
      engine.step();
      loss = l.tensor();
    }
    o.losses.push_back(loss.toVector<double>().at(0));
    o.lrs.push_back(engine.optimizer()->paramGroups()[0].lr());
  }
  for (const auto& [name, p] : model->namedParameters())
    o.state.emplace_back(name, p.tensor().toVector<double>());
  for (const auto& [name, b] : model->namedBuffers()) o.state.emplace_back(name, b.toVector<double>());
  for (const auto& [key, t] : engine.optimizer()->stateDict().state)
    o.state.emplace_back(key, t.toVector<double>());
  dropoutOffsets(*model, o.offsets);
  o.offsets.push_back(defaultGenerator().offset());
  o.replays = graph ? graph->replays() : 0;
  o.eager_because = graph ? graph->eagerBecause() : "";
  o.global_steps = engine.globalSteps();
  return o;
}

void expectSameOutcome(const Outcome& eager, const Outcome& graphed, const std::string& what) {
  EXPECT_EQ(graphed.replays, kSteps - kWarmup - 1) << what;  // the small batch runs eagerly
  EXPECT_EQ(graphed.global_steps, kSteps) << what;
  for (double l : eager.losses) EXPECT_TRUE(std::isfinite(l)) << what;
  EXPECT_EQ(graphed.losses, eager.losses) << what;
  EXPECT_EQ(graphed.lrs, eager.lrs) << what;
  EXPECT_EQ(graphed.offsets, eager.offsets) << what;
  ASSERT_EQ(graphed.state.size(), eager.state.size()) << what;
  for (size_t i = 0; i < eager.state.size(); ++i) {
    EXPECT_EQ(graphed.state[i].first, eager.state[i].first) << what;
    EXPECT_EQ(graphed.state[i].second, eager.state[i].second) << what << ": " << eager.state[i].first;
  }
}

void expectReplaysAreTheEagerSteps(const Setup& s, const std::string& what0) {
  // The small batch after the capture, and where the capture would come if every shape counted
  // alike: each shape warms up on its own, so the full batch is the one captured either way.
  for (int small_step : {kSmallStep, kWarmup}) {
    const std::string what = what0 + ", small batch at step " + std::to_string(small_step);
    const Outcome eager = train(s, false, small_step), graphed = train(s, true, small_step);
    expectSameOutcome(eager, graphed, what);
  }
}

Variable ce(parallel::Engine& engine, const Tensor& x, const Tensor& y) {
  return engine.forwardLoss(Variable(x), [&](const Variable& out) { return autograd::crossEntropy(out, y); });
}

// Next-token loss over every position, as the trainer takes it: the output layer and the cross
// entropy in one op (LanguageModel::forwardLoss).
Variable lmLoss(parallel::Engine& engine, const Tensor& x, const Tensor& y) {
  auto& lm = dynamic_cast<nn::LanguageModel&>(*engine.model());
  return engine.forwardWith([&] { return lm.forwardLoss(Variable(x), y); });
}

std::function<std::pair<Tensor, Tensor>(int, int64_t)> images(const Shape& item) {
  return [item](int step, int64_t rows) {
    Shape s = {rows};
    s.insert(s.end(), item.begin(), item.end());
    Tensor x = Tensor::empty(s);
    Generator(100 + step).uniform(x, 0, 1);
    std::vector<int64_t> y(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) y[static_cast<size_t>(i)] = (i * 7 + step) % 10;
    return std::make_pair(x, Tensor::fromVector(y, {rows}));
  };
}

constexpr int64_t kVocab = 40, kTime = 12;

// Token windows of a vocabulary; with `ignored`, a number of targets that changes from step to step
// are ignore_index (-100), so a mean's row count baked into the graph would show.
std::function<std::pair<Tensor, Tensor>(int, int64_t)> tokensOf(int64_t vocab, bool ignored) {
  return [vocab, ignored](int step, int64_t rows) {
    Generator g(200 + step);
    std::vector<int64_t> v(static_cast<size_t>(rows * (kTime + 1)));
    for (auto& t : v) t = static_cast<int64_t>(g.nextBelow(static_cast<uint64_t>(vocab)));
    Tensor all = Tensor::fromVector(v, {rows, kTime + 1});
    Tensor target = all.narrow(1, 1, kTime).contiguous();
    if (ignored) {
      std::vector<int64_t> t = target.toVector<int64_t>();
      for (size_t i = 0; i < t.size(); ++i)
        if ((i + static_cast<size_t>(step)) % static_cast<size_t>(3 + step % 4) == 0) t[i] = -100;
      target = Tensor::fromVector(t, target.shape());
    }
    return std::make_pair(all.narrow(1, 0, kTime).contiguous(), target);
  };
}
const auto tokens = tokensOf(kVocab, false);

std::function<std::shared_ptr<nn::Module>()> zoo(const std::string& name) {
  return [name] {
    Generator g(7);
    nn::ModelOptions o;
    o.generator = &g;
    return nn::makeModel(name, o);
  };
}

std::function<std::shared_ptr<nn::Module>()> gpt(int64_t checkpoint_every, int64_t vocab = kVocab) {
  return [checkpoint_every, vocab] {
    Generator g(3);
    nn::ModelOptions o;
    o.vocab_size = vocab;
    o.block_size = 16;
    o.n_layer = 2;
    o.n_head = 4;
    o.n_embd = 32;
    o.dropout = 0.2;
    o.checkpoint_every = checkpoint_every;
    o.generator = &g;
    return nn::makeModel("gpt", o);
  };
}

parallel::EngineOptions options(optim::OptimizerSpec optimizer, optim::SchedulerSpec scheduler = {},
                                double clipping = 0.0) {
  parallel::EngineOptions o;
  o.optimizer = std::move(optimizer);
  o.scheduler = std::move(scheduler);
  o.gradient_clipping = clipping;
  return o;
}

optim::SchedulerSpec warmupDecay() {
  return {"WarmupDecayLR",
          {{"warmup_min_lr", 0.0},
           {"warmup_max_lr", 2e-3},
           {"warmup_num_steps", int64_t{4}},
           {"total_num_steps", int64_t{12}}}};
}

TEST(GpuStepGraph, seed_cnn_with_adam_and_a_warmup_decay_schedule_replays_the_eager_steps_bitwise) {
  LOCKSTEP_REQUIRE_GPU();
  expectReplaysAreTheEagerSteps(
      {zoo("mnist_cnn"), options({"Adam", {{"lr", 1e-3}}}, warmupDecay()), images({1, 28, 28}), ce},
      "mnist_cnn adam");
}

TEST(GpuStepGraph, adamw_with_clipping_and_a_cosine_schedule_replays_the_eager_steps_bitwise) {
  LOCKSTEP_REQUIRE_GPU();
  // 0.05 is well below the seed CNN's gradient norms here: every step clips.
  expectReplaysAreTheEagerSteps(
      {zoo("mnist_cnn"),
       options({"AdamW", {{"lr", 2e-3}, {"weight_decay", 0.05}}},
               {"CosineAnnealingLR", {{"T_max", int64_t{8}}, {"eta_min", 1e-4}}}, 0.05),
       images({1, 28, 28}), ce},
      "mnist_cnn adamw clipping");
}

TEST(GpuStepGraph, dropout_modules_with_nesterov_sgd_and_a_step_schedule_replay_the_eager_steps_bitwise) {
  LOCKSTEP_REQUIRE_GPU();
  auto make = [] {
    Generator g(5);
    auto m = std::make_shared<nn::Sequential>();
    m->push_back(std::make_shared<nn::Linear>(nn::LinearOptions{20, 32, true, &g}));
    m->push_back(std::make_shared<nn::ReLU>());
    m->push_back(std::make_shared<nn::Dropout>(nn::DropoutOptions{.p = 0.3}));
    m->push_back(std::make_shared<nn::Linear>(nn::LinearOptions{32, 32, true, &g}));
    m->push_back(std::make_shared<nn::ReLU>());
    m->push_back(std::make_shared<nn::Dropout>(nn::DropoutOptions{.p = 0.2}));
    m->push_back(std::make_shared<nn::Linear>(nn::LinearOptions{32, 10, true, &g}));
    return std::static_pointer_cast<nn::Module>(m);
  };
  expectReplaysAreTheEagerSteps(
      {make,
       options({"SGD", {{"lr", 0.05}, {"momentum", 0.9}, {"nesterov", true}, {"weight_decay", 1e-3}}},
               {"StepLR", {{"step_size", int64_t{3}}, {"gamma", 0.5}}}),
       images({20}), ce},
      "mlp dropout sgd");
}

TEST(GpuStepGraph, gpt_with_dropout_and_adamw_replays_the_eager_steps_bitwise) {
  LOCKSTEP_REQUIRE_GPU();
  expectReplaysAreTheEagerSteps(
      {gpt(0), options({"AdamW", {{"lr", 1e-3}, {"weight_decay", 0.1}}}, warmupDecay()), tokens, lmLoss},
      "gpt dropout adamw");
}

TEST(GpuStepGraph, gpt_with_checkpointed_blocks_dropout_and_clipping_replays_the_eager_steps_bitwise) {
  LOCKSTEP_REQUIRE_GPU();
  // The recomputation in backward redraws each block's dropout masks from the saved offsets.
  expectReplaysAreTheEagerSteps({gpt(1), options({"Adam", {{"lr", 1e-3}}}, {}, 0.1), tokens, lmLoss},
                                "gpt checkpointed dropout clipping");
}

TEST(GpuStepGraph, gpt_in_bf16_with_a_padded_vocabulary_and_ignored_targets_replays_the_eager_steps_bitwise) {
  LOCKSTEP_REQUIRE_GPU();
  // 41 words: the fused output layer pads its rows of logits to 48 (bf16) with -inf; autocast's
  // lowered layer norms, the GELU epilogues and the cross entropy of bf16 logits; and a mean over a
  // number of kept rows that changes every step.
  parallel::EngineOptions o = options({"AdamW", {{"lr", 1e-3}, {"weight_decay", 0.1}}}, warmupDecay());
  o.precision = parallel::Precision::bf16;
  expectReplaysAreTheEagerSteps({gpt(0, 41), o, tokensOf(41, true), lmLoss},
                                "gpt bf16 vocab 41 ignored targets");
}

TEST(GpuStepGraph, resnet_with_batch_norm_and_sgd_momentum_replays_the_eager_steps_bitwise) {
  LOCKSTEP_REQUIRE_GPU();
  expectReplaysAreTheEagerSteps(
      {zoo("resnet18_cifar"), options({"SGD", {{"lr", 0.05}, {"momentum", 0.9}}}), images({3, 32, 32}), ce},
      "resnet18_cifar sgd");
}

// A step CUDA refuses to capture, the kind of bug the capture exists to catch: its loss read back on
// the host (the capture fails in the forward, after the dropout draws), or a stream forked into the
// capture and never joined back (the whole step's host side has run when cudaStreamEndCapture
// refuses it: AdamW's step counts, the schedule, clipping's norm, the gradients, the engine's count).
// cuda_graph: auto (OnCaptureFailure::run_eagerly): the host side is put back, the step runs eagerly
// as every step after it, and the run is the eager run, bitwise; no stream is left capturing.
// cuda_graph: true (raise): the step throws CUDA's reason and captureFailed() says so.
TEST(GpuStepGraph, a_step_cuda_refuses_to_capture_runs_eagerly_with_the_eager_results_under_auto) {
  LOCKSTEP_REQUIRE_GPU();
  auto readBack = [](parallel::Engine& engine, const Tensor& x, const Tensor& y) {
    Variable l = lmLoss(engine, x, y);
    if (kernels::isCapturingGraph(kGpu)) (void)l.tensor().item<float>();
    return l;
  };
  const lockstep::cuda::Stream side = lockstep::cuda::streamFromPool(0);
  Tensor marker = Tensor::zeros({16}, DType::f32, kGpu);
  auto unjoined = [&](parallel::Engine& engine, const Tensor& x, const Tensor& y) {
    if (kernels::isCapturingGraph(kGpu)) {
      lockstep::cuda::Event forked;
      forked.record(lockstep::cuda::currentStream(0));
      forked.block(side);  // side joins the capture and is never joined back
      lockstep::cuda::StreamGuard on_side(side);
      marker.fill(1.0);
    }
    return lmLoss(engine, x, y);
  };
  using LossFn = std::function<Variable(parallel::Engine&, const Tensor&, const Tensor&)>;
  for (const auto& [name, loss] : {std::pair<const char*, LossFn>{"read back", readBack},
                                   std::pair<const char*, LossFn>{"unjoined", unjoined}}) {
    SCOPED_TRACE(name);
    const ::Setup s{gpt(0), options({"AdamW", {{"lr", 1e-3}, {"weight_decay", 0.1}}}, warmupDecay(), 0.5),
                    tokens, loss};
    const Outcome eager = train(s, false, kSmallStep);
    const Outcome fallback = train(s, true, kSmallStep, parallel::OnCaptureFailure::run_eagerly);
    EXPECT_FALSE(kernels::isCapturingGraph(kGpu));
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
    ASSERT_EQ(cudaStreamIsCapturing(side.handle(), &status), cudaSuccess);
    EXPECT_EQ(status, cudaStreamCaptureStatusNone);
    EXPECT_EQ(fallback.replays, 0);
    EXPECT_FALSE(fallback.eager_because.empty());
    EXPECT_EQ(fallback.global_steps, kSteps);
    EXPECT_EQ(fallback.losses, eager.losses);
    EXPECT_EQ(fallback.lrs, eager.lrs);
    EXPECT_EQ(fallback.offsets, eager.offsets);
    ASSERT_EQ(fallback.state.size(), eager.state.size());
    for (size_t i = 0; i < eager.state.size(); ++i) {
      EXPECT_EQ(fallback.state[i].second, eager.state[i].second) << eager.state[i].first;
    }
  }
  const ::Setup s{gpt(0), options({"AdamW", {{"lr", 1e-3}, {"weight_decay", 0.1}}}, warmupDecay()), tokens,
                  readBack};

  manualSeed(1234);
  auto model = s.make();
  model->to(kGpu);
  parallel::Engine engine(model, s.options, parallel::DistributedEnvironment{});
  parallel::StepGraph graph(
      engine, [&](const Tensor& x, const Tensor& y) { return s.loss(engine, x, y); }, kWarmup);
  for (int step = 0; step < kWarmup; ++step) {
    auto [x, y] = s.batch(step, kRows);
    graph.step(x.to(kGpu), y.to(kGpu));
  }
  auto [x, y] = s.batch(kWarmup, kRows);
  EXPECT_THROW(graph.step(x.to(kGpu), y.to(kGpu)), std::exception);
  EXPECT_TRUE(graph.captureFailed());
  EXPECT_TRUE(graph.eagerBecause().empty());
}

TEST(GpuStepGraph, steps_the_host_decides_differently_are_not_captured) {
  LOCKSTEP_REQUIRE_GPU();
  auto blocker = [](parallel::EngineOptions o) {
    auto m = zoo("mnist_cnn")();
    m->to(kGpu);
    parallel::Engine e(m, o, parallel::DistributedEnvironment{});
    return parallel::stepGraphBlocker(e);
  };
  parallel::EngineOptions scaled = options({"Adam", {{"lr", 1e-3}}});
  scaled.loss_scaler = optim::LossScalerOptions{};
  EXPECT_NE(blocker(scaled).find("loss scaler"), std::string::npos);
  parallel::EngineOptions accumulated = options({"SGD", {{"lr", 0.1}}});
  accumulated.gradient_accumulation_steps = 2;
  EXPECT_NE(blocker(accumulated).find("accumulation"), std::string::npos);
  EXPECT_EQ(blocker(options({"AdamW", {{"lr", 1e-3}}}, warmupDecay(), 1.0)), "");
}

}  // namespace
