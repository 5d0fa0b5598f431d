#pragma once
// Llama: the Llama / Llama 2 decoder-only transformer as Hugging Face's LlamaForCausalLM builds
// it. Token embedding, n_layer pre-norm blocks (RMSNorm; causal self-attention with rotary position
// embeddings (rotate-half convention) and optional grouped-query attention, n_kv_head key/value
// heads shared by n_head / n_kv_head query heads each; a SwiGLU MLP
// down_proj(silu(gate_proj(x)) * up_proj(x))), a final RMSNorm and an untied lm_head. No biases,
// no dropout by default (attention_dropout 0). Weights N(0, 0.02) (initializer_range).
// Parameter names are Hugging Face's ("model.layers.0.self_attn.q_proj.weight", "lm_head.weight").
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/nn/embedding.h"
#include "lockstep/nn/layer_sequence.h"
#include "lockstep/nn/linear.h"
#include "lockstep/nn/models/language_model.h"
#include "lockstep/nn/module_dict.h"
#include "lockstep/nn/rms_norm.h"

namespace lockstep::nn {

struct LlamaOptions {
  int64_t vocab_size = 32000;
  int64_t block_size = 2048;  // max_position_embeddings
  int64_t n_layer = 32;       // num_hidden_layers
  int64_t n_head = 32;        // num_attention_heads
  int64_t n_kv_head = 0;      // num_key_value_heads; 0: n_head (no grouping)
  int64_t n_embd = 4096;      // hidden_size
  int64_t intermediate_size = 11008;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  double dropout = 0.0;  // attention_dropout
  int64_t checkpoint_every = 0;
  Generator* generator = nullptr;
};

/// llama-tiny (4 layers, 4 heads, 2 key/value heads, 128 wide, MLP 352) and llama-100m (16 layers,
/// 12 heads, 4 key/value heads, 768 wide, MLP 2048: about 101M parameters at a byte vocabulary).
/// ValueError listing the names for an unknown one.
LlamaOptions llamaPreset(const std::string& model_type, LlamaOptions base = {});
std::vector<std::string> llamaPresetNames();

class LlamaBlock;

class Llama : public LanguageModelWith<LlamaOptions>, public HasLayerSequence {
 public:
  explicit Llama(const LlamaOptions& options);
  Variable forward(const Variable& idx) override;
  /// The final norm, lm_head and the loss in one op (autograd::linearCrossEntropy).
  Variable forwardLoss(const Variable& idx, const Tensor& target,
                       const autograd::CrossEntropyOptions& opts = {}) override;
  /// The transformer blocks, in order.
  std::vector<Module*> layers() override;
  /// The layers a pipeline cuts into stages (nn/layer_sequence.h): the embedding, each block (with its rotary
  /// tables), the head (norm, lm_head).
  NamedModules sequenceLayers() override;
  std::string extraRepr() const override;

 private:
  /// Token check, rotary tables, embedding and blocks: the input of the final norm.
  Variable trunk(const Variable& idx);
  /// The rotary tables of t positions on the model's device (made or grown on first need).
  std::pair<Tensor, Tensor> rotary(int64_t t, const Device& device);

  std::shared_ptr<Embedding> embed_tokens_;
  std::shared_ptr<ModuleList<LlamaBlock>> layers_;
  std::shared_ptr<RMSNorm> norm_;
  std::shared_ptr<Linear> lm_head_;
  /// The rotary tables of positions 0, 1, ... (at most block_size) on each device a block of the
  /// model runs on (the blocks of a model split between the host and a GPU use both), made by the
  /// first forward there; a forward of T positions uses their first T rows.
  struct RotaryTables {
    Device device;
    Tensor cos, sin;
  };
  std::vector<RotaryTables> rotary_;
};

class LlamaBlock : public Module {
 public:
  LlamaBlock(const LlamaOptions& options, Generator& gen);
  /// The rotary tables of the current sequence length must be set first (Llama::forward does).
  Variable forward(const Variable& x) override;
  void setRotary(Tensor cos, Tensor sin) {
    cos_ = std::move(cos);
    sin_ = std::move(sin);
  }

 private:
  LlamaOptions options_;
  std::shared_ptr<RMSNorm> input_layernorm_, post_attention_layernorm_;
  std::shared_ptr<ModuleDict> self_attn_, mlp_;
  std::shared_ptr<Linear> q_proj_, k_proj_, v_proj_, o_proj_, gate_proj_, up_proj_, down_proj_;
  Tensor cos_, sin_;
};

}  // namespace lockstep::nn
