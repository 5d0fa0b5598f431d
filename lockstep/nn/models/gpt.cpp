#include "lockstep/nn/models/gpt.h"

#include <cmath>
#include <map>

#include "lockstep/autograd/ops/activation.h"
#include "lockstep/autograd/ops/arith.h"
#include "lockstep/autograd/ops/attention.h"
#include "lockstep/autograd/ops/dropout.h"
#include "lockstep/autograd/ops/linear.h"
#include "lockstep/autograd/ops/shape.h"
#include "lockstep/nn/init.h"
#include "lockstep/util/suggest.h"

namespace lockstep::nn {

namespace {

struct Sizes {
  int64_t n_layer, n_head, n_embd;
};

const std::map<std::string, Sizes>& presets() {
  static const std::map<std::string, Sizes> table = {
      {"openai-gpt", {12, 12, 768}},  {"gpt2", {12, 12, 768}},     {"gpt2-medium", {24, 16, 1024}},
      {"gpt2-large", {36, 20, 1280}}, {"gpt2-xl", {48, 25, 1600}}, {"gopher-44m", {8, 16, 512}},
      {"gpt-mini", {6, 6, 192}},      {"gpt-micro", {4, 4, 128}},  {"gpt-nano", {3, 3, 48}},
  };
  return table;
}

std::shared_ptr<Linear> makeLinear(int64_t in, int64_t out, bool bias, double std, Generator& gen) {
  auto l = std::make_shared<Linear>(LinearOptions{in, out, bias, &gen});
  Tensor w = l->weight().tensor();
  init::normal(w, 0.0, std, gen);
  if (bias) {
    Tensor b = l->bias().tensor();
    b.fill(0.0);
  }
  return l;
}

}  // namespace

std::vector<std::string> gptPresetNames() {
  std::vector<std::string> names;
  for (const auto& [name, sizes] : presets()) names.push_back(name);
  return names;
}

GptOptions gptPreset(const std::string& model_type, GptOptions base) {
  auto it = presets().find(model_type);
  if (it == presets().end()) {
    std::string known, near = nearestKey(model_type, gptPresetNames());
    for (const auto& n : gptPresetNames()) known += (known.empty() ? "" : ", ") + n;
    throw ValueError("unknown gpt model_type '" + model_type + "'" +
                     (near.empty() ? "" : " (did you mean '" + near + "'?)") + "; known: " + known);
  }
  base.n_layer = it->second.n_layer;
  base.n_head = it->second.n_head;
  base.n_embd = it->second.n_embd;
  return base;
}

GptBlock::GptBlock(const GptOptions& o, Generator& gen) : Module("Block"), options_(o) {
  const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(o.n_layer));
  ln_1_ = registerModule("ln_1", std::make_shared<LayerNorm>(LayerNormOptions{{o.n_embd}}));
  attn_ = registerModule("attn", std::make_shared<ModuleDict>());
  c_attn_ = attn_->add("c_attn", makeLinear(o.n_embd, 3 * o.n_embd, o.bias, 0.02, gen));
  attn_proj_ = attn_->add("c_proj", makeLinear(o.n_embd, o.n_embd, o.bias, proj_std, gen));
  ln_2_ = registerModule("ln_2", std::make_shared<LayerNorm>(LayerNormOptions{{o.n_embd}}));
  mlp_ = registerModule("mlp", std::make_shared<ModuleDict>());
  c_fc_ = mlp_->add("c_fc", makeLinear(o.n_embd, 4 * o.n_embd, o.bias, 0.02, gen));
  mlp_proj_ = mlp_->add("c_proj", makeLinear(4 * o.n_embd, o.n_embd, o.bias, proj_std, gen));
}

Variable GptBlock::forward(const Variable& x) {
  using namespace autograd;
  const int64_t h = options_.n_head;
  const double p = isTraining() ? options_.dropout : 0.0;
  // Attention: q, k, v [B, H, T, D] from one projection, causal fused attention, back to [B, T, C].
  // Each LayerNorm's one reader is a linear layer: under autocast it writes the reader's dtype.
  Variable y =
      packedQkvAttention(c_attn_->forward(ln_1_->forwardLowered(x)), h, {.causal = true, .dropout_p = p});
  // Without dropout the residual adds run in the projections' GEMMs (linearResidual).
  Variable r = p > 0 ? add(x, dropout(attn_proj_->forward(y), p, true)) : attn_proj_->forwardResidual(y, x);
  // mlp.c_proj(gelu(mlp.c_fc(ln_2(r)))) as one op: on a GPU the GELU runs in the GEMMs' epilogues.
  const Variable ln = ln_2_->forwardLowered(r);
  if (p > 0) {
    Variable m = geluMlp(ln, c_fc_->weight(), c_fc_->bias(), mlp_proj_->weight(), mlp_proj_->bias());
    return add(r, dropout(m, p, true));
  }
  return geluMlp(ln, c_fc_->weight(), c_fc_->bias(), mlp_proj_->weight(), mlp_proj_->bias(), r);
}

Gpt::Gpt(const GptOptions& o) : LanguageModelWith("GPT", o) {
  LOCKSTEP_ENFORCE(o.vocab_size > 0 && o.block_size > 0 && o.n_layer > 0 && o.n_head > 0 && o.n_embd > 0,
                   ValueError, "GPT: vocab_size, block_size, n_layer, n_head and n_embd must be positive");
  LOCKSTEP_ENFORCE(o.n_embd % o.n_head == 0, ValueError, "GPT: n_embd (", o.n_embd,
                   ") must be a multiple of n_head (", o.n_head, ")");
  LOCKSTEP_ENFORCE(o.dropout >= 0 && o.dropout < 1, ValueError, "GPT: dropout must be in [0, 1), got ",
                   o.dropout);
  LOCKSTEP_ENFORCE(o.checkpoint_every >= 0, ValueError, "GPT: checkpoint_every must be >= 0");
  Generator& gen = o.generator ? *o.generator : defaultGenerator();
  auto transformer = registerModule("transformer", std::make_shared<ModuleDict>());
  wte_ = transformer->add(
      "wte", std::make_shared<Embedding>(EmbeddingOptions{o.vocab_size, o.n_embd, std::nullopt, 0.02, &gen}));
  wpe_ = transformer->add(
      "wpe", std::make_shared<Embedding>(EmbeddingOptions{o.block_size, o.n_embd, std::nullopt, 0.02, &gen}));
  h_ = transformer->add("h", std::make_shared<ModuleList<GptBlock>>());
  for (int64_t i = 0; i < o.n_layer; ++i) h_->push_back(std::make_shared<GptBlock>(o, gen));
  ln_f_ = transformer->add("ln_f", std::make_shared<LayerNorm>(LayerNormOptions{{o.n_embd}}));
}

Variable Gpt::embed(const Variable& idx, bool training) {
  using namespace autograd;
  const Device device = wte_->weight().tensor().device();
  checkTokenInput(idx.tensor(), options_.vocab_size, options_.block_size, "GPT", device);
  const int64_t t = idx.size(1);
  const double p = training ? options_.dropout : 0.0;
  // The positions are looked up on the table's device; made once there, not copied every step.
  if (!positions_.defined() || positions_.device() != device)
    positions_ = Tensor::arange(options_.block_size).to(device);
  Variable pos = wpe_->forward(Variable(positions_.slice(0, t)));  // [T, C], broadcast over the batch
  return dropout(add(wte_->forward(idx), pos), p, p > 0);
}

Variable Gpt::head(const Variable& x) {
  return autograd::linear(ln_f_->forwardLowered(x), wte_->weight(), Variable());  // tied output layer
}

Variable Gpt::trunk(const Variable& idx) {
  return runBlocks(layers(), embed(idx, isTraining()), isTraining() ? options_.checkpoint_every : 0);
}

Variable Gpt::forward(const Variable& idx) { return head(trunk(idx)); }

Variable Gpt::forwardLoss(const Variable& idx, const Tensor& target,
                          const autograd::CrossEntropyOptions& opts) {
  // Per-row losses come from the logits (the fused op sums its rows as it goes).
  if (opts.reduction == autograd::Reduction::none) return LanguageModel::forwardLoss(idx, target, opts);
  const Tensor flat = flatTargets(target, idx, "GPT");
  Variable h = ln_f_->forwardLowered(trunk(idx));
  return autograd::linearCrossEntropy(autograd::reshape(h, {flat.size(0), h.size(-1)}), wte_->weight(), flat,
                                      opts);
}

NamedModules Gpt::sequenceLayers() {
  // The embedding and the head both hold wte: the tied parameter of the sequence.
  auto embedding = std::make_shared<SequenceLayer>(
      "GptEmbedding", NamedModules{{"wte", wte_}, {"wpe", wpe_}},
      [this](Module& self, const Variable& idx) { return embed(idx, self.isTraining()); });
  NamedModules layers{{"embedding", embedding}};
  for (size_t i = 0; i < h_->size(); ++i) layers.emplace_back("transformer.h." + std::to_string(i), (*h_)[i]);
  auto out = std::make_shared<SequenceLayer>("GptHead", NamedModules{{"ln_f", ln_f_}, {"wte", wte_}},
                                             [this](Module&, const Variable& x) { return head(x); });
  layers.emplace_back("head", out);
  return layers;
}

std::vector<Module*> Gpt::layers() {
  std::vector<Module*> blocks;
  for (size_t i = 0; i < h_->size(); ++i) blocks.push_back((*h_)[i].get());
  return blocks;
}

std::string Gpt::extraRepr() const {
  return detail::concat("vocab_size=", options_.vocab_size, ", block_size=", options_.block_size,
                        ", n_layer=", options_.n_layer, ", n_head=", options_.n_head,
                        ", n_embd=", options_.n_embd);
}

}  // namespace lockstep::nn
