// The language models of the zoo (gpt, llama): parameter names and counts as in their originals,
// shapes and errors, causality, checkpointed blocks bitwise equal to plain ones (dropout on), and generation
// (tests/optim/language_model_overfit_test.cpp trains one).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>

#include "common/check.h"
#include "lockstep/autograd.h"
#include "lockstep/nn.h"

using namespace lockstep;
using namespace lockstep::nn;

namespace {

std::shared_ptr<LanguageModel> makeLm(const std::string& name, ModelOptions o) {
  return std::dynamic_pointer_cast<LanguageModel>(makeModel(name, o));
}

ModelOptions tiny(Generator* gen) {
  ModelOptions o;
  o.vocab_size = 32;
  o.block_size = 16;
  o.n_layer = 2;
  o.n_head = 2;
  o.n_embd = 16;
  o.generator = gen;
  return o;
}

Tensor tokens(int64_t b, int64_t t, int64_t vocab, uint64_t seed) {
  Generator g(seed);
  Tensor x = Tensor::empty({b, t}, DType::i64);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<int64_t>()[i] = static_cast<int64_t>(g.nextBelow(vocab));
  return x;
}

bool bitwiseEqual(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.shape() != b.shape()) return false;
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.dataPtr(), cb.dataPtr(), ca.numel() * dtypeSize(ca.dtype())) == 0;
}

}  // namespace

TEST(Gpt, names_and_counts_follow_gpt2) {
  Generator g(1);
  ModelOptions o;
  o.model_type = "gpt-mini";
  o.generator = &g;
  auto m = makeLm("gpt", o);
  // wte V*C + wpe B*C + L * (12 C^2 + 13 C) + ln_f 2C with V = B = 256, C = 192, L = 6.
  EXPECT_EQ(m->numParameters(), 256 * 192 + 256 * 192 + 6 * (12 * 192 * 192 + 13 * 192) + 2 * 192);
  auto names = m->namedParameters();
  EXPECT_EQ(names.front().first, "transformer.wte.weight");
  EXPECT_EQ(names[2].first, "transformer.h.0.ln_1.weight");
  EXPECT_EQ(names[4].first, "transformer.h.0.attn.c_attn.weight");
  EXPECT_EQ(names.back().first, "transformer.ln_f.bias");
  EXPECT_EQ(m->numLayers(), 6);
  EXPECT_THROW(gptPreset("gpt-mni"), ValueError);
}

TEST(Llama, names_and_counts_follow_hugging_face) {
  Generator g(1);
  ModelOptions o;
  o.model_type = "llama-tiny";
  o.generator = &g;
  auto m = makeLm("llama", o);
  // embed + lm_head 2 V C, per layer q,o C^2 + k,v 2 C (C/H * Hkv) + 3 C I + 2 C, norm C.
  const int64_t c = 128, kv = 128 / 4 * 2, inter = 352;
  EXPECT_EQ(m->numParameters(), 2 * 256 * c + 4 * (2 * c * c + 2 * c * kv + 3 * c * inter + 2 * c) + c);
  auto names = m->namedParameters();
  EXPECT_EQ(names.front().first, "model.embed_tokens.weight");
  EXPECT_EQ(names[1].first, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(names.back().first, "lm_head.weight");
  ModelOptions big;
  big.model_type = "llama-100m";
  big.generator = &g;
  big.n_layer = 1;  // the preset's sizes with one layer: fast to build
  EXPECT_EQ(makeLm("llama", big)->numParameters(),
            2 * 256 * 768 + (2 * 768 * 768 + 2 * 768 * 256 + 3 * 768 * 2048 + 2 * 768) + 768);
}

TEST(LanguageModel, logits_have_batch_time_vocab_shape_and_bad_input_is_named) {
  for (const char* name : {"gpt", "llama"}) {
    Generator g(2);
    auto m = makeLm(name, tiny(&g));
    for (auto [b, t] : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {2, 16}}) {
      Variable y = m->forward(Variable(tokens(b, t, 32, 5)));
      EXPECT_EQ(y.shape(), (Shape{b, t, 32})) << name;
    }
    EXPECT_THROW(m->forward(Variable(tokens(1, 17, 32, 5))), ValueError) << "longer than block_size";
    Tensor bad = tokens(1, 4, 32, 5);
    bad.data<int64_t>()[2] = 32;
    EXPECT_THROW(m->forward(Variable(bad)), ValueError) << "token outside the vocabulary";
    EXPECT_THROW(m->forward(Variable(Tensor::zeros({2, 4}))), ValueError) << "f32 input";
  }
}

TEST(LanguageModel, position_t_sees_no_later_token) {
  for (const char* name : {"gpt", "llama"}) {
    Generator g(3);
    auto m = makeLm(name, tiny(&g));
    m->eval();
    Tensor a = tokens(1, 10, 32, 7), b = a.clone();
    b.data<int64_t>()[6] = (b.data<int64_t>()[6] + 1) % 32;
    Tensor ya = m->forward(Variable(a)).tensor(), yb = m->forward(Variable(b)).tensor();
    EXPECT_TRUE(bitwiseEqual(ya.reshape({10, 32}).slice(0, 6), yb.reshape({10, 32}).slice(0, 6)))
        << name << ": positions before the change moved";
    EXPECT_FALSE(bitwiseEqual(ya.reshape({10, 32}).slice(6, 10), yb.reshape({10, 32}).slice(6, 10))) << name;
  }
}

TEST(LanguageModel, tables_made_for_short_sequences_serve_longer_ones_bitwise) {
  // gpt keeps its positions and llama its rotary tables from one forward to the next (growing them
  // for llama): a long forward after short ones gives a fresh model's logits.
  for (const char* name : {"gpt", "llama"}) {
    Variable y[2];
    for (int warm = 0; warm < 2; ++warm) {
      Generator g(8);
      ModelOptions o = tiny(&g);
      o.block_size = 600;
      auto m = makeLm(name, o);
      m->eval();
      if (warm) {
        for (int64_t t : {3, 300}) m->forward(Variable(tokens(1, t, 32, 4)));
      }
      y[warm] = m->forward(Variable(tokens(1, 600, 32, 5)));
    }
    EXPECT_TRUE(bitwiseEqual(y[0].tensor(), y[1].tensor())) << name;
  }
}

TEST(LanguageModel, checkpointed_blocks_give_bitwise_the_plain_gradients_with_dropout) {
  for (const char* name : {"gpt", "llama"}) {
    std::vector<Tensor> grads[2];
    for (int ck = 0; ck < 2; ++ck) {
      Generator g(4);
      ModelOptions o = tiny(&g);
      o.n_layer = 3;
      o.dropout = 0.2;
      o.checkpoint_every = ck;
      auto m = makeLm(name, o);
      manualSeed(11);
      autograd::resetCheckpointProfile();
      Tensor x = tokens(2, 12, 32, 9), target = tokens(2, 12, 32, 10);
      Variable logits = m->forward(Variable(x));
      autograd::crossEntropy(autograd::reshape(logits, {24, 32}), target.reshape({24})).backward();
      for (const auto& p : m->parameters()) grads[ck].push_back(p.grad());
    }
    ASSERT_EQ(grads[0].size(), grads[1].size());
    for (size_t i = 0; i < grads[0].size(); ++i) {
      EXPECT_TRUE(bitwiseEqual(grads[0][i], grads[1][i])) << name << " gradient " << i;
    }
    // Blocks 1 and 2 of 3 were recomputed (the last keeps its activations), each taking its
    // attention's output from the first run instead of recomputing it: still bitwise.
    EXPECT_EQ(autograd::checkpointProfile().recomputes, 2) << name;
    EXPECT_EQ(autograd::checkpointProfile().stash_reuses, 2) << name;
  }
}

// forwardLoss (the output layer and the cross entropy as one op) against the logits' cross entropy:
// the loss and every parameter's gradient, in f32 and under bf16 autocast (where both read bf16
// logits of the same GEMM); per-row losses (reduction none) come from the logits; a target that does
// not match the input is named.
TEST(LanguageModel, forward_loss_is_the_cross_entropy_of_the_logits) {
  auto maxAbs = [](const Tensor& t) {
    double m = 0;
    for (double v : t.toVector<double>()) m = std::max(m, std::abs(v));
    return m;
  };
  for (const char* name : {"gpt", "llama"}) {
    for (bool bf16 : {false, true}) {
      std::vector<Tensor> grads[2];
      double losses[2] = {0, 0};
      for (int fused = 0; fused < 2; ++fused) {
        Generator g(4);
        auto m = makeLm(name, tiny(&g));
        manualSeed(11);  // the same dropout masks
        std::optional<autograd::AutocastGuard> ac;
        if (bf16) ac.emplace(DType::bf16);
        Tensor x = tokens(2, 12, 32, 9), target = tokens(2, 12, 32, 10);
        target.data<int64_t>()[5] = -100;  // an ignored position
        Variable loss = fused ? m->forwardLoss(Variable(x), target)
                              : autograd::crossEntropy(autograd::reshape(m->forward(Variable(x)), {24, 32}),
                                                       target.reshape({24}));
        ac.reset();
        EXPECT_EQ(loss.dtype(), DType::f32);
        losses[fused] = loss.item();
        loss.backward();
        for (const auto& p : m->parameters()) grads[fused].push_back(p.grad());
      }
      const std::string what = std::string(name) + (bf16 ? " bf16" : " f32");
      EXPECT_NEAR(losses[1], losses[0], 1e-6 * std::abs(losses[0])) << what;
      ASSERT_EQ(grads[0].size(), grads[1].size());
      for (size_t i = 0; i < grads[0].size(); ++i) {
        const double tol = (bf16 ? 1e-2 : 1e-5) * maxAbs(grads[0][i]);
        EXPECT_TRUE(lockstep::testing::tensorsNear(grads[1][i], grads[0][i], tol, 0))
            << what << " gradient " << i;
      }
    }
    Generator g(4);
    auto m = makeLm(name, tiny(&g));
    Tensor x = tokens(2, 12, 32, 9), target = tokens(2, 12, 32, 10);
    autograd::CrossEntropyOptions none;
    none.reduction = autograd::Reduction::none;
    EXPECT_EQ(m->forwardLoss(Variable(x), target, none).shape(), (Shape{24}));
    try {
      m->forwardLoss(Variable(x), target.reshape({24}));
      ADD_FAILURE() << name << ": a flat target was taken";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("targets must be i64 token ids of the input's shape"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(LanguageModel, generate_is_reproducible_and_top_k_1_is_greedy) {
  Generator g(6);
  auto m = makeLm("gpt", tiny(&g));
  std::vector<int64_t> prompt = {1, 2, 3};
  GenerateOptions greedy;
  greedy.max_new_tokens = 30;  // past block_size: the context is cropped
  greedy.temperature = 0;
  auto a = generate(*m, prompt, greedy);
  EXPECT_EQ(a.size(), 33u);
  Generator s1(9);
  GenerateOptions top1 = greedy;
  top1.temperature = 1.0;
  top1.top_k = 1;
  top1.generator = &s1;
  EXPECT_EQ(generate(*m, prompt, top1), a);
  Generator s3(9), s4(9);
  GenerateOptions sampled = greedy;
  sampled.temperature = 1.5;
  sampled.generator = &s3;
  auto b = generate(*m, prompt, sampled);
  EXPECT_NE(b, a) << "sampling at temperature 1.5 followed the greedy path for 30 tokens";
  sampled.generator = &s4;
  EXPECT_EQ(generate(*m, prompt, sampled), b);
  EXPECT_TRUE(m->isTraining()) << "generate restores the training mode";
  EXPECT_THROW(generate(*m, {}, greedy), ValueError);
  EXPECT_THROW(generate(*m, {40}, greedy), ValueError);
  // Weights that are not finite give NaN logits: an error, not text picked by accident.
  Tensor w = m->parameters().front().tensor();
  w.fill(std::nan(""));
  for (GenerateOptions* o : {&greedy, &sampled}) {
    try {
      generate(*m, prompt, *o);
      ADD_FAILURE() << "generated from NaN logits";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("its weights are not finite"), std::string::npos) << e.what();
    }
  }
}

TEST(LanguageModel, weight_decay_groups_follow_mingpt) {
  Generator g(7);
  for (const char* name : {"gpt", "llama"}) {
    auto m = makeLm(name, tiny(&g));
    WeightDecayGroups w = weightDecayGroups(*m);
    EXPECT_EQ(w.decay.size() + w.no_decay.size(), m->parameters().size());
    for (auto& [pname, p] : m->namedParameters()) {
      bool decays = false;
      for (const auto& d : w.decay) decays = decays || d.sameAs(p);
      const bool linear_weight = pname.find("_proj.weight") != std::string::npos ||
                                 pname.find("c_attn.weight") != std::string::npos ||
                                 pname.find("c_fc.weight") != std::string::npos || pname == "lm_head.weight";
      EXPECT_EQ(decays, linear_weight) << name << " " << pname;
    }
  }
}
