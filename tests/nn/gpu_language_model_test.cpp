// The language models on a GPU give the CPU's numbers: a tiny GPT and a tiny Llama (grouped-query
// attention) built twice from one seed, one moved to cuda:0, run forward and backward on the same
// tokens; logits, loss and every parameter gradient agree, also with dropout in train mode (the GPU
// draws the CPU's Philox decisions) and with checkpointed blocks. Generation and bad input on the
// GPU, and the loss op in f16 under a loss scale. Runs with ctest -L gpu; skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/check.h"
#include "common/gpu.h"
#include "lockstep/autograd.h"
#include "lockstep/kernels.h"
#include "lockstep/kernels/cuda/fused_attention.h"
#include "lockstep/nn.h"

using namespace lockstep;
using autograd::Variable;
using lockstep::testing::closeness;

namespace {

const Device kGpu = Device::cuda(0);
constexpr int64_t kVocab = 40, kBatch = 3, kTime = 12;

struct Case {
  const char* model;
  double dropout;
  int64_t checkpoint_every;  // the GPU model's; the CPU model runs plainly
};

std::shared_ptr<nn::LanguageModel> build(const Case& c, int64_t checkpoint_every) {
  Generator g(3);
  nn::ModelOptions o;
  o.vocab_size = kVocab;
  o.block_size = 16;
  o.n_layer = 3;
  o.n_head = 4;
  o.n_embd = 32;
  if (std::string(c.model) == "llama") {
    o.n_kv_head = 2;  // grouped-query attention: two query heads per key/value head
    o.intermediate_size = 64;
  }
  o.dropout = c.dropout;
  o.checkpoint_every = checkpoint_every;
  o.generator = &g;
  return std::dynamic_pointer_cast<nn::LanguageModel>(nn::makeModel(c.model, o));
}

Tensor tokens(uint64_t seed) {
  Generator g(seed);
  std::vector<int64_t> v(static_cast<size_t>(kBatch * kTime));
  for (auto& x : v) x = static_cast<int64_t>(g.nextBelow(kVocab));
  return Tensor::fromVector(v, {kBatch, kTime});
}

struct Run {
  Tensor logits, loss;
  std::vector<std::pair<std::string, Tensor>> grads;
};

// One training-mode forward and backward of the mean next-token loss, the dropout draws from a
// freshly seeded default generator (the same on both devices).
Run forwardBackward(nn::LanguageModel& m, const Device& d) {
  Tensor x = tokens(5).to(d), y = tokens(6).reshape({kBatch * kTime}).to(d);
  m.train();
  m.zeroGrad();
  manualSeed(11);
  Variable logits = m.forward(Variable(x));
  Variable loss = autograd::crossEntropy(autograd::reshape(logits, {kBatch * kTime, kVocab}), y);
  loss.backward();
  Run r{logits.tensor(), loss.tensor(), {}};
  for (const auto& [name, p] : m.namedParameters()) r.grads.emplace_back(name, p.grad());
  return r;
}

void gpuMatchesCpu(const Case& c) {
  auto cpu = build(c, 0), gpu = build(c, c.checkpoint_every);
  // A forward on the host first: the position table (gpt) and rotary tables (llama) it leaves
  // behind must be remade on the GPU after the move.
  {
    autograd::NoGradGuard no_grad;
    gpu->eval();
    gpu->forward(Variable(tokens(5)));
  }
  gpu->to(kGpu);
  ASSERT_EQ(deviceName(gpu->device()), "cuda:0");
  Run a = forwardBackward(*cpu, Device::cpu()), b = forwardBackward(*gpu, kGpu);
  ASSERT_EQ(b.logits.device(), kGpu) << c.model;
  EXPECT_LT(closeness(b.logits, a.logits, 1e-5, 1e-4), 1.0) << c.model << " logits, dropout " << c.dropout;
  EXPECT_NEAR(b.loss.itemDouble(), a.loss.itemDouble(), 1e-5 * std::max(1.0, std::abs(a.loss.itemDouble())))
      << c.model << " loss, dropout " << c.dropout;
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) {
    ASSERT_TRUE(a.grads[i].second.defined() && b.grads[i].second.defined())
        << c.model << " " << a.grads[i].first;
    EXPECT_EQ(b.grads[i].second.device(), kGpu) << a.grads[i].first;
    // Gradients of 0.02-scale weights: an absolute floor well below their size, else 1e-3 relative.
    EXPECT_LT(closeness(b.grads[i].second, a.grads[i].second, 1e-6, 1e-3), 1.0)
        << c.model << " gradient of " << a.grads[i].first << ", dropout " << c.dropout
        << ", checkpoint_every " << c.checkpoint_every;
  }
}

}  // namespace

TEST(GpuLanguageModel, gpt_forward_and_gradients_match_the_cpu) {
  LOCKSTEP_REQUIRE_GPU();
  gpuMatchesCpu({"gpt", 0.0, 0});
}

TEST(GpuLanguageModel, llama_with_grouped_query_attention_matches_the_cpu) {
  LOCKSTEP_REQUIRE_GPU();
  gpuMatchesCpu({"llama", 0.0, 0});
}

TEST(GpuLanguageModel, gpt_with_dropout_draws_the_cpu_masks) {
  LOCKSTEP_REQUIRE_GPU();
  gpuMatchesCpu({"gpt", 0.2, 0});
}

TEST(GpuLanguageModel, llama_with_attention_dropout_draws_the_cpu_masks) {
  LOCKSTEP_REQUIRE_GPU();
  gpuMatchesCpu({"llama", 0.2, 0});
}

TEST(GpuLanguageModel, checkpointed_blocks_with_dropout_match_the_plain_cpu_run) {
  LOCKSTEP_REQUIRE_GPU();
  gpuMatchesCpu({"gpt", 0.2, 1});
  gpuMatchesCpu({"llama", 0.2, 1});
}

// GPT in bf16 under autocast with heads cuDNN's fused attention takes (head dim 64, no dropout),
// the path `lockstep train` takes on a GPU: q, k and v read in place from the fused projection,
// their gradients written by cuDNN into the projection's gradient (no copies), the residual adds in
// the projections' GEMMs. The loss and every gradient as the CPU's within bf16's roundings (a wrong
// layout or a missed write is off by the values' own size).
TEST(GpuLanguageModel, gpt_in_bf16_on_cudnn_attention_matches_the_cpu) {
  LOCKSTEP_REQUIRE_GPU();
  auto make = [] {
    Generator g(7);
    nn::ModelOptions o;
    o.vocab_size = 64;
    o.block_size = 64;
    o.n_layer = 2;
    o.n_head = 4;
    o.n_embd = 256;
    o.dropout = 0.0;
    o.generator = &g;
    return std::dynamic_pointer_cast<nn::LanguageModel>(nn::makeModel("gpt", o));
  };
  auto cpu = make(), gpu = make();
  gpu->to(kGpu);
  Generator tg(9);
  std::vector<int64_t> v(2 * 64);
  for (auto& x : v) x = static_cast<int64_t>(tg.nextBelow(64));
  const Tensor x = Tensor::fromVector(v, {2, 64});
  std::vector<int64_t> shifted(v.begin() + 1, v.end());
  shifted.push_back(0);
  const Tensor y = Tensor::fromVector(shifted, {2 * 64});
  const int64_t runs = kernels::cuda::fusedAttentionRuns(),
                in_place = kernels::cuda::fusedAttentionInPlaceRuns();
  std::vector<Tensor> losses;
  for (auto* m : {cpu.get(), gpu.get()}) {
    const Device d = m->device();
    m->train();
    m->zeroGrad();
    Variable loss;
    {
      autograd::AutocastGuard bf16(DType::bf16);
      Variable logits = m->forward(Variable(x.to(d)));
      loss = autograd::crossEntropy(autograd::reshape(logits, {2 * 64, 64}), y.to(d));
    }
    loss.backward();
    losses.push_back(loss.tensor().to(DType::f32));
  }
  // Two layers: a forward and a backward each on cuDNN, the backward's gradients in place.
  EXPECT_EQ(kernels::cuda::fusedAttentionRuns() - runs, 4);
  EXPECT_EQ(kernels::cuda::fusedAttentionInPlaceRuns() - in_place, 2);
  EXPECT_NEAR(losses[1].itemDouble(), losses[0].itemDouble(), 2e-2 * std::abs(losses[0].itemDouble()));
  auto a = cpu->namedParameters(), b = gpu->namedParameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const Tensor ga = a[i].second.grad(), gb = b[i].second.grad();
    ASSERT_TRUE(ga.defined() && gb.defined()) << a[i].first;
    const std::vector<float> av = ga.to(DType::f32).toVector<float>();
    float scale = 0;
    for (float e : av) scale = std::max(scale, std::abs(e));
    // bf16 keeps ~3 significant digits; two layers of them: a few percent of the largest gradient.
    EXPECT_LT(closeness(gb, ga, 3e-2 * scale, 3e-2), 1.0) << "gradient of " << a[i].first;
  }
}

TEST(GpuLanguageModel, generate_runs_on_the_gpu_and_follows_the_cpu_greedy_path) {
  LOCKSTEP_REQUIRE_GPU();
  for (const char* name : {"gpt", "llama"}) {
    auto cpu = build({name, 0.0, 0}, 0), gpu = build({name, 0.0, 0}, 0);
    gpu->to(kGpu);
    nn::GenerateOptions greedy;
    greedy.max_new_tokens = 24;  // past block_size: the context is cropped
    greedy.temperature = 0;
    const std::vector<int64_t> prompt = {1, 2, 3};
    EXPECT_EQ(nn::generate(*gpu, prompt, greedy), nn::generate(*cpu, prompt, greedy)) << name;
    Generator s(9);
    nn::GenerateOptions sampled = greedy;
    sampled.temperature = 0.8;
    sampled.top_k = 5;
    sampled.generator = &s;
    EXPECT_EQ(nn::generate(*gpu, prompt, sampled).size(), 27u) << name;
    EXPECT_TRUE(gpu->isTraining()) << "generate restores the training mode";
    EXPECT_EQ(gpu->device(), kGpu) << name << ": generate leaves the model where it was";
  }
}

TEST(GpuLanguageModel, bad_token_ids_on_the_gpu_and_ids_on_the_host_are_named) {
  LOCKSTEP_REQUIRE_GPU();
  for (const char* name : {"gpt", "llama"}) {
    auto m = build({name, 0.0, 0}, 0);
    m->to(kGpu);
    std::vector<int64_t> v = {1, 2, kVocab, 3};
    try {
      m->forward(Variable(Tensor::fromVector(v, {1, 4}).to(kGpu)));
      ADD_FAILURE() << name << ": a token outside the vocabulary passed";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("token id 40 at position 2"), std::string::npos) << e.what();
    }
    try {
      m->forward(Variable(tokens(5)));
      ADD_FAILURE() << name << ": token ids on the host passed into a model on the GPU";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("on cpu but the model is on cuda:0"), std::string::npos)
          << e.what();
    }
  }
}

TEST(GpuLanguageModel, llama_split_between_the_host_and_the_gpu_in_one_process_trains_as_on_the_host) {
  // One-process model parallelism (nn/layer_placement.h): the embedding and the first decoder layer
  // on the CPU, the rest on cuda:0, the activation and its gradient moved between them.
  LOCKSTEP_REQUIRE_GPU();
  const Case c{"llama", 0.0, 0};
  auto cpu = build(c, 0);
  std::shared_ptr<nn::Module> split_model = build(c, 0);
  const auto layers = static_cast<int64_t>(nn::layerSequence(*split_model).size());
  nn::PlacedLayers split(split_model, {0, 2, layers}, {Device::cpu(), kGpu});
  EXPECT_EQ(split.deviceOf(0), Device::cpu());
  EXPECT_EQ(split.deviceOf(static_cast<size_t>(layers) - 1), kGpu);
  const auto a = forwardBackward(*cpu, Device::cpu());
  Tensor x = tokens(5), y = tokens(6).reshape({kBatch * kTime}).to(kGpu);
  split.train();
  manualSeed(11);
  Variable logits = split(Variable(x));
  ASSERT_EQ(logits.tensor().device(), kGpu);
  autograd::crossEntropy(autograd::reshape(logits, {kBatch * kTime, kVocab}), y).backward();
  EXPECT_LT(closeness(logits.tensor(), a.logits, 1e-5, 1e-4), 1.0);
  size_t i = 0;
  for (const auto& [name, p] : split_model->namedParameters()) {
    ASSERT_TRUE(p.hasGrad()) << name;
    EXPECT_EQ(p.grad().device(), p.tensor().device()) << name;
    EXPECT_LT(closeness(p.grad(), a.grads.at(i++).second, 1e-6, 1e-3), 1.0) << name;
  }
}

TEST(GpuLanguageModel, f16_loss_under_a_loss_scale_keeps_the_small_gradients) {
  // The loss of forwardLoss (autograd::linearCrossEntropy) in f16 under a loss scale (DeepSpeed's
  // fp16: the loss times the scale before backward), at a vocabulary and a row count where a row's
  // softmax entries over the rows, p / 4,096 ~ 6e-8, are at f16's smallest subnormal: the op takes
  // the composed ops for f16, whose backward scales the logits' gradient before rounding it, so the
  // gradients match the f64 oracle's (the fused op's unscaled f16 gradient would lose them).
  LOCKSTEP_REQUIRE_GPU();
  const int64_t n = 4096, c = 16, v = 4099;
  const double scale = 32768.0;  // 65,536 is past f16's largest value
  const Tensor x = lockstep::testing::randomTensor({n, c}, DType::f64, 1).to(DType::f16);
  const Tensor w = lockstep::testing::randomTensor({v, c}, DType::f64, 2).to(DType::f16);
  std::vector<int64_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[i] = (i * 7 + 3) % v;
  const Tensor target = Tensor::fromVector(t, {n});
  const Tensor x64 = x.to(DType::f64), w64 = w.to(DType::f64);
  const kernels::CrossEntropyParams p64{kernels::LossReduction::mean, 0.0, -100};
  const Tensor logits = kernels::linearForward(x64, w64, Tensor());
  auto [want, lse] = kernels::crossEntropyForward(logits, target, p64);
  const Tensor dlogits =
      kernels::crossEntropyBackward(Tensor::scalar(scale, DType::f64), logits, lse, target, p64);
  Variable xv(x.to(kGpu), true), wv(w.to(kGpu), true);
  Variable loss = autograd::linearCrossEntropy(xv, wv, target.to(kGpu));
  EXPECT_NEAR(loss.tensor().to(DType::f64).itemDouble(), want.itemDouble(), 4e-3 * want.itemDouble());
  loss.backward(Tensor::scalar(scale, loss.dtype()).to(kGpu));
  EXPECT_LT(closeness(xv.grad().to(DType::f64), kernels::linearBackwardData(dlogits, w64), 2e-2, 1e-2), 1.0);
  EXPECT_LT(closeness(wv.grad().to(DType::f64), kernels::linearBackwardWeights(dlogits, x64, false).first,
                      2e-2, 1e-2),
            1.0);
}
