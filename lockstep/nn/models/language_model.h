#pragma once
// LanguageModel: what every decoder-only transformer of the zoo is (gpt, llama). forward() takes
// token ids, i64 [B, T] with T <= blockSize(), and returns next-token logits [B, T, vocabSize()].
// generate() samples continuations from any of them. forward() keeps tables it makes for the model's
// device (gpt's position ids, llama's rotary tables) on the model: one thread at a time per model.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/autograd/ops/loss.h"
#include "lockstep/nn/module.h"
#include "lockstep/tensor/generator.h"
#include "lockstep/util/error.h"

namespace lockstep::nn {

class LanguageModel : public Module {
 public:
  using Module::Module;
  virtual int64_t blockSize() const = 0;
  virtual int64_t vocabSize() const = 0;
  /// Transformer blocks.
  virtual int64_t numLayers() const = 0;
  /// Activation checkpointing: every k-th transformer block runs under autograd::checkpoint
  /// (k = 1: every block; 0: none).
  virtual void setCheckpointEvery(int64_t k) = 0;
  virtual int64_t checkpointEvery() const = 0;
  /// The next-token cross entropy of forward(idx) against target (i64, idx's [B, T]): the loss
  /// crossEntropy(forward(idx) as [B T, V], target as [B T], opts) gives. gpt and llama take their
  /// output layer and the loss together (autograd::linearCrossEntropy, chunk by chunk), so the
  /// [B, T, V] logits are never held: at GPT-2's vocabulary they are the largest activation of a
  /// step. ValueError for a target that does not match idx.
  virtual Variable forwardLoss(const Variable& idx, const Tensor& target,
                               const autograd::CrossEntropyOptions& opts = {});
};

/// A language model whose Options has block_size, vocab_size, n_layer and checkpoint_every (gpt's,
/// llama's): the sizes and the checkpointing switch answered from its options once for them all.
template <typename Options>
class LanguageModelWith : public LanguageModel {
 public:
  int64_t blockSize() const override { return options_.block_size; }
  int64_t vocabSize() const override { return options_.vocab_size; }
  int64_t numLayers() const override { return options_.n_layer; }
  void setCheckpointEvery(int64_t k) override {
    LOCKSTEP_ENFORCE(k >= 0, ValueError, typeName(), ": checkpoint_every must be >= 0, got ", k);
    options_.checkpoint_every = k;
  }
  int64_t checkpointEvery() const override { return options_.checkpoint_every; }
  const Options& options() const { return options_; }

 protected:
  LanguageModelWith(std::string type_name, const Options& options)
      : LanguageModel(std::move(type_name)), options_(options) {}

  Options options_;
};

/// ValueError unless idx is i64 [B, T] with 1 <= T <= block_size, every id in 0..vocab-1 and idx on
/// `device` (the model's; `model` names the model in the message). Ids on a GPU are checked from a
/// host copy (a device-to-host copy that waits for the GPU), except while the step is being captured
/// into a CUDA graph (kernels::isCapturingGraph), when the embedding's device check stands in. Pure.
void checkTokenInput(const Tensor& idx, int64_t vocab_size, int64_t block_size, const char* model,
                     const Device& device);

/// target (i64, the shape of idx) as [B T]: the rows of a language model's flattened logits.
/// ValueError naming `model` otherwise.
Tensor flatTargets(const Tensor& target, const Variable& idx, const char* model);

/// Runs x through blocks in order; with checkpoint_every = k > 0 each run of k consecutive blocks
/// is one autograd::checkpoint segment (its inputs kept, the rest recomputed in backward), except
/// the last run, which keeps its activations (torch's checkpoint_sequential does the same).
Variable runBlocks(const std::vector<Module*>& blocks, Variable x, int64_t checkpoint_every);

/// minGPT's configure_optimizers split: the weights of Linear layers take weight decay; biases,
/// norm weights and embedding tables (the tied output layer's included) do not. Each list in the
/// model's parameter order; together they hold every parameter once.
struct WeightDecayGroups {
  std::vector<Variable> decay, no_decay;
};
WeightDecayGroups weightDecayGroups(Module& model);

struct GenerateOptions {
  int64_t max_new_tokens = 100;
  /// 0: greedy (argmax); otherwise logits / temperature are sampled.
  double temperature = 1.0;
  /// Sample only among the top_k most likely tokens (0: all).
  int64_t top_k = 0;
  /// The sampling generator; nullptr = defaultGenerator().
  Generator* generator = nullptr;
};

/// minGPT's generate(): appends max_new_tokens tokens to `prompt`, each from the logits of the
/// last position with the context cropped to the model's block size; runs in eval mode without
/// gradients and restores the model's mode. The model may be on any device: the context goes there
/// and the last position's logits come back to the host, where the sampling runs. Returns prompt + new
/// tokens. ValueError for an empty prompt, a token outside the vocabulary, or temperature < 0.
std::vector<int64_t> generate(LanguageModel& model, const std::vector<int64_t>& prompt,
                              const GenerateOptions& options = {});

/// generate()'s loop over any forward (a model split over processes: a pipeline's stages):
/// `last_logits(context)` runs the context [1, T] (T at most block_size, the window generate()
/// takes) and returns the last position's logits as host f32 [vocab], or an undefined tensor in a
/// process that does not compute them; `agree(token)` then gets this process's choice (-1 without
/// logits) and returns the one every process takes (the last stage's). Without `agree` the choice
/// stands. The same tokens as generate() for the same logits and generator. Not in eval mode by
/// itself: the caller sets it.
std::vector<int64_t> generateWith(const std::vector<int64_t>& prompt, int64_t vocab, int64_t block_size,
                                  const GenerateOptions& options,
                                  const std::function<Tensor(const std::vector<int64_t>&)>& last_logits,
                                  const std::function<int64_t(int64_t)>& agree = {});

}  // namespace lockstep::nn
