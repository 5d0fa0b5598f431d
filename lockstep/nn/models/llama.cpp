#include "lockstep/nn/models/llama.h"

#include <algorithm>
#include <map>

#include "lockstep/autograd/ops/activation.h"
#include "lockstep/autograd/ops/arith.h"
#include "lockstep/autograd/ops/attention.h"
#include "lockstep/autograd/ops/rotary.h"
#include "lockstep/autograd/ops/shape.h"
#include "lockstep/nn/init.h"
#include "lockstep/util/suggest.h"

namespace lockstep::nn {

namespace {

struct Sizes {
  int64_t n_layer, n_head, n_kv_head, n_embd, intermediate_size;
};

const std::map<std::string, Sizes>& presets() {
  static const std::map<std::string, Sizes> table = {
      {"llama-tiny", {4, 4, 2, 128, 352}},
      {"llama-100m", {16, 12, 4, 768, 2048}},
  };
  return table;
}

std::shared_ptr<Linear> makeLinear(int64_t in, int64_t out, Generator& gen) {
  auto l = std::make_shared<Linear>(LinearOptions{in, out, false, &gen});
  Tensor w = l->weight().tensor();
  init::normal(w, 0.0, 0.02, gen);
  return l;
}

}  // namespace

std::vector<std::string> llamaPresetNames() {
  std::vector<std::string> names;
  for (const auto& [name, sizes] : presets()) names.push_back(name);
  return names;
}

LlamaOptions llamaPreset(const std::string& model_type, LlamaOptions base) {
  auto it = presets().find(model_type);
  if (it == presets().end()) {
    std::string known, near = nearestKey(model_type, llamaPresetNames());
    for (const auto& n : llamaPresetNames()) known += (known.empty() ? "" : ", ") + n;
    throw ValueError("unknown llama model_type '" + model_type + "'" +
                     (near.empty() ? "" : " (did you mean '" + near + "'?)") + "; known: " + known);
  }
  base.n_layer = it->second.n_layer;
  base.n_head = it->second.n_head;
  base.n_kv_head = it->second.n_kv_head;
  base.n_embd = it->second.n_embd;
  base.intermediate_size = it->second.intermediate_size;
  return base;
}

LlamaBlock::LlamaBlock(const LlamaOptions& o, Generator& gen) : Module("LlamaDecoderLayer"), options_(o) {
  const int64_t d = o.n_embd / o.n_head;
  self_attn_ = registerModule("self_attn", std::make_shared<ModuleDict>());
  q_proj_ = self_attn_->add("q_proj", makeLinear(o.n_embd, o.n_head * d, gen));
  k_proj_ = self_attn_->add("k_proj", makeLinear(o.n_embd, o.n_kv_head * d, gen));
  v_proj_ = self_attn_->add("v_proj", makeLinear(o.n_embd, o.n_kv_head * d, gen));
  o_proj_ = self_attn_->add("o_proj", makeLinear(o.n_head * d, o.n_embd, gen));
  mlp_ = registerModule("mlp", std::make_shared<ModuleDict>());
  gate_proj_ = mlp_->add("gate_proj", makeLinear(o.n_embd, o.intermediate_size, gen));
  up_proj_ = mlp_->add("up_proj", makeLinear(o.n_embd, o.intermediate_size, gen));
  down_proj_ = mlp_->add("down_proj", makeLinear(o.intermediate_size, o.n_embd, gen));
  input_layernorm_ =
      registerModule("input_layernorm", std::make_shared<RMSNorm>(RMSNormOptions{o.n_embd, o.rms_norm_eps}));
  post_attention_layernorm_ = registerModule(
      "post_attention_layernorm", std::make_shared<RMSNorm>(RMSNormOptions{o.n_embd, o.rms_norm_eps}));
}

Variable LlamaBlock::forward(const Variable& x) {
  using namespace autograd;
  const int64_t b = x.size(0), t = x.size(1), h = options_.n_head, kv = options_.n_kv_head;
  const int64_t d = options_.n_embd / h;
  const double p = isTraining() ? options_.dropout : 0.0;
  // Not forwardLowered: n and m have several readers, whose gradients must add in f32 (autocast's
  // own casts do that; a lowered norm's gradients would add in bf16).
  Variable n = input_layernorm_->forward(x);
  auto heads = [&](const Variable& v, int64_t count) {
    return transpose(reshape(v, {b, t, count, d}), 1, 2);
  };
  Variable q = applyRotary(heads(q_proj_->forward(n), h), cos_, sin_);
  Variable k = applyRotary(heads(k_proj_->forward(n), kv), cos_, sin_);
  Variable v = heads(v_proj_->forward(n), kv);
  Variable y = scaledDotProductAttention(q, k, v, {.causal = true, .dropout_p = p});
  // The residual adds run in the output projections' GEMMs (linearResidual).
  Variable r = o_proj_->forwardResidual(reshape(transpose(y, 1, 2), {b, t, h * d}), x);
  Variable m = post_attention_layernorm_->forward(r);
  return down_proj_->forwardResidual(swiglu(gate_proj_->forward(m), up_proj_->forward(m)), r);
}

Llama::Llama(const LlamaOptions& options) : LanguageModelWith("LlamaForCausalLM", options) {
  LlamaOptions& o = options_;
  if (o.n_kv_head == 0) o.n_kv_head = o.n_head;
  LOCKSTEP_ENFORCE(o.vocab_size > 0 && o.block_size > 0 && o.n_layer > 0 && o.n_head > 0 && o.n_embd > 0 &&
                       o.intermediate_size > 0,
                   ValueError,
                   "Llama: vocab_size, block_size, n_layer, n_head, n_embd and intermediate_size must be "
                   "positive");
  LOCKSTEP_ENFORCE(o.n_embd % o.n_head == 0 && (o.n_embd / o.n_head) % 2 == 0, ValueError, "Llama: n_embd (",
                   o.n_embd, ") must be n_head (", o.n_head, ") times an even head size (rotary embeddings)");
  LOCKSTEP_ENFORCE(o.n_kv_head > 0 && o.n_head % o.n_kv_head == 0, ValueError, "Llama: n_head (", o.n_head,
                   ") must be a multiple of n_kv_head (", o.n_kv_head, ")");
  LOCKSTEP_ENFORCE(o.dropout >= 0 && o.dropout < 1, ValueError, "Llama: dropout must be in [0, 1)");
  Generator& gen = o.generator ? *o.generator : defaultGenerator();
  auto model = registerModule("model", std::make_shared<ModuleDict>());
  embed_tokens_ = model->add("embed_tokens", std::make_shared<Embedding>(EmbeddingOptions{
                                                 o.vocab_size, o.n_embd, std::nullopt, 0.02, &gen}));
  layers_ = model->add("layers", std::make_shared<ModuleList<LlamaBlock>>());
  for (int64_t i = 0; i < o.n_layer; ++i) layers_->push_back(std::make_shared<LlamaBlock>(o, gen));
  norm_ = model->add("norm", std::make_shared<RMSNorm>(RMSNormOptions{o.n_embd, o.rms_norm_eps}));
  lm_head_ = registerModule("lm_head", makeLinear(o.n_embd, o.vocab_size, gen));
}

std::vector<Module*> Llama::layers() {
  std::vector<Module*> blocks;
  for (size_t i = 0; i < layers_->size(); ++i) blocks.push_back((*layers_)[i].get());
  return blocks;
}

std::pair<Tensor, Tensor> Llama::rotary(int64_t t, const Device& device) {
  auto it =
      std::find_if(rotary_.begin(), rotary_.end(), [&](const RotaryTables& r) { return r.device == device; });
  if (it == rotary_.end()) it = rotary_.insert(rotary_.end(), RotaryTables{device, {}, {}});
  // Each table entry depends on its position alone, so the first T rows of longer tables are the
  // tables of T positions. They grow by doubling (up to block_size) as longer sequences come.
  if (!it->cos.defined() || it->cos.size(0) < t) {
    const int64_t rows =
        std::min(options_.block_size, std::max(t, it->cos.defined() ? 2 * it->cos.size(0) : 256));
    auto [cos, sin] = autograd::rotaryTables(rows, options_.n_embd / options_.n_head, options_.rope_theta);
    it->cos = cos.to(device);
    it->sin = sin.to(device);
  }
  return {it->cos.slice(0, t), it->sin.slice(0, t)};
}

Variable Llama::trunk(const Variable& idx) {
  checkTokenInput(idx.tensor(), options_.vocab_size, options_.block_size, "Llama",
                  embed_tokens_->weight().tensor().device());
  const auto [cos, sin] = rotary(idx.size(1), embed_tokens_->weight().tensor().device());
  for (size_t i = 0; i < layers_->size(); ++i) (*layers_)[i]->setRotary(cos, sin);
  return runBlocks(layers(), embed_tokens_->forward(idx), isTraining() ? options_.checkpoint_every : 0);
}

Variable Llama::forward(const Variable& idx) {
  return lm_head_->forward(norm_->forwardLowered(trunk(idx)));  // the head is the final norm's one reader
}

Variable Llama::forwardLoss(const Variable& idx, const Tensor& target,
                            const autograd::CrossEntropyOptions& opts) {
  // Per-row losses come from the logits (the fused op sums its rows as it goes).
  if (opts.reduction == autograd::Reduction::none) return LanguageModel::forwardLoss(idx, target, opts);
  const Tensor flat = flatTargets(target, idx, "Llama");
  Variable h = norm_->forwardLowered(trunk(idx));
  return autograd::linearCrossEntropy(autograd::reshape(h, {flat.size(0), h.size(-1)}), lm_head_->weight(),
                                      flat, opts);
}

NamedModules Llama::sequenceLayers() {
  auto embedding = std::make_shared<SequenceLayer>(
      "LlamaEmbedding", NamedModules{{"embed_tokens", embed_tokens_}}, [this](Module&, const Variable& idx) {
        checkTokenInput(idx.tensor(), options_.vocab_size, options_.block_size, "Llama",
                        embed_tokens_->weight().tensor().device());
        return embed_tokens_->forward(idx);
      });
  NamedModules layers{{"embedding", embedding}};
  for (size_t i = 0; i < layers_->size(); ++i) {
    std::shared_ptr<LlamaBlock> block = (*layers_)[i];
    // A block alone on a stage gets its rotary tables from the length and the device of its own input.
    layers.emplace_back("model.layers." + std::to_string(i),
                        std::make_shared<SequenceLayer>("LlamaDecoderLayer", NamedModules{{"block", block}},
                                                        [this, block](Module&, const Variable& x) {
                                                          const auto [cos, sin] =
                                                              rotary(x.size(1), x.tensor().device());
                                                          block->setRotary(cos, sin);
                                                          return (*block)(x);
                                                        }));
  }
  auto norm = norm_;
  auto lm_head = lm_head_;
  layers.emplace_back(
      "head", std::make_shared<SequenceLayer>("LlamaHead", NamedModules{{"norm", norm}, {"lm_head", lm_head}},
                                              [norm, lm_head](Module&, const Variable& x) {
                                                return lm_head->forward(norm->forwardLowered(x));
                                              }));
  return layers;
}

std::string Llama::extraRepr() const {
  return detail::concat("vocab_size=", options_.vocab_size, ", block_size=", options_.block_size,
                        ", n_layer=", options_.n_layer, ", n_head=", options_.n_head,
                        ", n_kv_head=", options_.n_kv_head, ", n_embd=", options_.n_embd);
}

}  // namespace lockstep::nn
