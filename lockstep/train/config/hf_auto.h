#pragma once
// Hugging Face Trainer's "auto" values in a DeepSpeed config, resolved as its DeepSpeed integration
// resolves them (transformers' integrations/deepspeed.py, HfTrainerDeepSpeedConfig's
// trainer_config_process and trainer_config_finalize): a key the integration copies from a
// TrainingArguments flag takes what Trainer fills in when that flag is not given (its default:
// lr 5e-5, gradient_clipping 1.0, Adam's betas 0.9/0.999 and eps 1e-8, no weight decay, no warmup,
// fp16/bf16 off), a key it computes from other values is computed the same way (train_batch_size
// from the micro batch, accumulation and world size; warmup_max_lr from the optimizer's lr; the
// ZeRO bucket sizes from the model's hidden size; total_num_steps from the run's length). Each resolved value
// is noted once in the log; one lockstep cannot know (no batch size at all, a model without a hidden size) is
// refused through config_keys::refuse, so that one error lists them all. An "auto" anywhere else
// is left in place for its key's own check, as the integration leaves it for DeepSpeed. Pure.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/nn/models/model_zoo.h"
#include "lockstep/optim/registry.h"

namespace YAML {
class Node;
}

namespace lockstep::train {

struct BatchSizes;

class HfAutoValues {
 public:
  /// Takes every "auto" at a path the integration fills in out of `root` (a mapping), writes
  /// Trainer's default in place of those it copies from a TrainingArguments flag, and notes them.
  explicit HfAutoValues(YAML::Node root);

  /// Whether `path` ("optimizer.params.lr") was "auto".
  bool has(const std::string& path) const;

  /// Before the batch sizes are resolved, with the values left after the "auto" ones were taken
  /// out: when the batch keys were "auto" and none is left, refuses (lockstep has no per-device
  /// batch size of its own) and sets `micro` to 1 so that reading goes on to find other refusals.
  void checkBatch(const std::optional<int64_t>& train, std::optional<int64_t>& micro) const;
  /// Notes the value each "auto" batch key took.
  void noteBatch(const BatchSizes& batch, int64_t world_size) const;

  /// scheduler.params.warmup_max_lr "auto": the optimizer's learning rate, written into `root`.
  void fillScheduler(YAML::Node root, const optim::OptimizerSpec& optimizer) const;

  /// The ZeRO keys the integration derives from the model's hidden size (reduce_bucket_size =
  /// hidden^2; at stage 3 stage3_prefetch_bucket_size = 0.9 hidden^2 and
  /// stage3_param_persistence_threshold = 10 hidden), written into `root`; refused for a model
  /// without a hidden size, and the stage 3 keys below stage 3 (where the integration leaves them
  /// "auto" and DeepSpeed refuses them).
  void fillZero(YAML::Node root, const std::string& model, const nn::ModelOptions& options) const;

 private:
  std::vector<std::string> paths_;
};

/// The model's hidden size as the integration reads it from a Hugging Face model's config
/// (hidden_size, else the largest of hidden_sizes): gpt and llama n_embd (their preset's when
/// unset), mlp its widest hidden layer; nullopt for the models without one.
std::optional<int64_t> modelHiddenSize(const std::string& model, const nn::ModelOptions& options);

}  // namespace lockstep::train
