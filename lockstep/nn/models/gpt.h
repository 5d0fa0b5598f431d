#pragma once
// GPT: the GPT-2 / minGPT decoder-only transformer. Token and learned position embeddings, then
// n_layer pre-norm blocks (x + attn(ln_1(x)), x + mlp(ln_2(x)); causal multi-head self-attention
// through the fused scaled-dot-product op; an MLP of 4 * n_embd with tanh-approximated GELU, as
// GPT-2's "gelu_new"), a final LayerNorm, and an output layer tied to the token embedding (GPT-2,
// nanoGPT). Initialisation is minGPT's: N(0, 0.02) for linear and embedding weights, zero biases,
// and N(0, 0.02 / sqrt(2 * n_layer)) for the residual projections (c_proj).
// Parameter names are GPT-2's ("transformer.h.0.attn.c_attn.weight"); the tied output layer has no
// name of its own (a state dict lists the table once, as "transformer.wte.weight").
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/nn/embedding.h"
#include "lockstep/nn/layer_norm.h"
#include "lockstep/nn/layer_sequence.h"
#include "lockstep/nn/linear.h"
#include "lockstep/nn/models/language_model.h"
#include "lockstep/nn/module_dict.h"

namespace lockstep::nn {

struct GptOptions {
  int64_t vocab_size = 50257;
  int64_t block_size = 1024;
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;
  /// minGPT's embd_pdrop, resid_pdrop and attn_pdrop (one value for the three).
  double dropout = 0.1;
  bool bias = true;
  /// Activation checkpointing: segments of this many consecutive blocks (0: off).
  int64_t checkpoint_every = 0;
  /// Borrowed during construction; nullptr = defaultGenerator().
  Generator* generator = nullptr;
};

/// The sizes of minGPT's model_type presets: gpt-nano (3 layers, 3 heads, 48 wide), gpt-micro
/// (4, 4, 128), gpt-mini (6, 6, 192), gopher-44m (8, 16, 512), openai-gpt and gpt2 (12, 12, 768),
/// gpt2-medium (24, 16, 1024), gpt2-large (36, 20, 1280), gpt2-xl (48, 25, 1600). Only n_layer,
/// n_head and n_embd change. ValueError listing the names for an unknown one.
GptOptions gptPreset(const std::string& model_type, GptOptions base = {});
std::vector<std::string> gptPresetNames();

class GptBlock;

class Gpt : public LanguageModelWith<GptOptions>, public HasLayerSequence {
 public:
  explicit Gpt(const GptOptions& options);
  /// idx i64 [B, T], T <= block_size -> logits [B, T, vocab_size]. ValueError naming the shape,
  /// dtype or a token outside the vocabulary.
  Variable forward(const Variable& idx) override;
  /// ln_f, the tied output layer and the loss in one op (autograd::linearCrossEntropy).
  Variable forwardLoss(const Variable& idx, const Tensor& target,
                       const autograd::CrossEntropyOptions& opts = {}) override;
  /// The transformer blocks, in order.
  std::vector<Module*> layers() override;
  /// The layers a pipeline cuts into stages (nn/layer_sequence.h): the embedding (wte, wpe, dropout), each
  /// block, the head (ln_f and the output layer, tied to wte).
  NamedModules sequenceLayers() override;
  std::string extraRepr() const override;

 private:
  /// The forward before the blocks (token + position embeddings, dropout) and after them (ln_f,
  /// the tied output layer): the model's and its layer sequence's.
  Variable embed(const Variable& idx, bool training);
  Variable head(const Variable& x);
  /// Embeddings and blocks: the input of ln_f.
  Variable trunk(const Variable& idx);

  std::shared_ptr<Embedding> wte_, wpe_;
  std::shared_ptr<ModuleList<GptBlock>> h_;
  std::shared_ptr<LayerNorm> ln_f_;
  /// Positions 0 .. block_size - 1 (i64) where wpe lives, made by the first forward there.
  Tensor positions_;
};

/// One pre-norm transformer block (exposed for tests and for users composing their own models).
class GptBlock : public Module {
 public:
  GptBlock(const GptOptions& options, Generator& gen);
  Variable forward(const Variable& x) override;

 private:
  GptOptions options_;
  std::shared_ptr<LayerNorm> ln_1_, ln_2_;
  std::shared_ptr<ModuleDict> attn_, mlp_;
  std::shared_ptr<Linear> c_attn_, attn_proj_, c_fc_, mlp_proj_;
};

}  // namespace lockstep::nn
