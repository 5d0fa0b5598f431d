#pragma once
// The trainer's datasets, built from a DataConfig: train (optionally minus a validation split),
// validation and test sets, and evaluation of a model over one of them.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/comm/process_group.h"
#include "lockstep/data/dataset.h"
#include "lockstep/nn/loss.h"
#include "lockstep/nn/module.h"
#include "lockstep/parallel/engine.h"
#include "lockstep/train/config/config.h"

namespace lockstep::train {

struct TrainData {
  std::shared_ptr<data::Dataset> train;
  std::shared_ptr<data::Dataset> val;  // null when data.val_split is 0
  std::shared_ptr<data::Dataset> test;
  /// Language data: the tokenizer's vocabulary (256 for bytes, meta.json's for a token directory).
  int64_t vocab_size = 0;
  /// Language data: the tokenizer that made the ids (data::DatasetSplits::tokenizer); sampling
  /// text (a prompt's bytes in, bytes out) needs "byte".
  std::string tokenizer = "byte";
  /// Class i's name, where the dataset names its classes (image_folder); empty otherwise.
  std::vector<std::string> classes;
  /// The labels run 0 .. label_count - 1 (data::DatasetSplits'); 0 where the dataset does not say.
  int64_t label_count = 0;
};

/// Checks the dataset's files exist without loading them (for the launcher's parent process);
/// IoError naming the missing file.
void checkDataFiles(const DataConfig& config);

/// Loads the datasets; IoError naming the file when one is missing or corrupt. The validation
/// split is drawn with `seed`, so it is the same on every rank.
TrainData loadTrainData(const DataConfig& config, uint64_t seed);

/// Language models: logits [B, T, V] and targets [B, T] as [B*T, V] and [B*T] (every position is
/// one prediction); anything else unchanged. Pure.
autograd::Variable flattenPositions(const autograd::Variable& logits);
Tensor flattenPositions(const Tensor& target);

/// Whether language models take their output layer and loss as one op (true unless
/// LOCKSTEP_FUSED_LM_LOSS=0; read once).
bool fusedLanguageModelLoss();

/// One micro-batch's training loss on the engine's model: a language model's output layer and
/// cross entropy in one op (nn::LanguageModel::forwardLoss through Engine::forwardWith: the
/// [B, T, V] logits are never held whole), any other model's output through `criterion` (positions
/// flattened, Engine::forwardLoss). LOCKSTEP_FUSED_LM_LOSS=0 gives language models the composed ops
/// too (the same loss, rows summed in another order).
autograd::Variable microBatchLoss(parallel::Engine& engine, nn::CrossEntropyLoss& criterion,
                                  const Tensor& input, const Tensor& target);

struct EvalResult {
  double loss = 0;
  double accuracy = 0;
};

/// Mean cross-entropy and accuracy (next-token accuracy for language models, over every position) of model
/// over ds, in batches without gradients. With a group, each rank evaluates a fixed shard and the sums are
/// all-reduced (collective).
/// Which part of a dataset a rank evaluates, and over which group the sums are added up.
struct EvalShard {
  /// DistributedSampler's rank and replicas (without shuffling); count 1: the whole set in order.
  int index = 0, count = 1;
  /// Every rank of this group takes part in the allreduce of the sums; null: none.
  comm::ProcessGroup* reduce = nullptr;
};

/// Windows per evaluation batch of a language model: about 128K positions (512 windows of 256),
/// fewer where `vocab` (the logits' width; 0: unknown) would take their f32 logits past 256 MiB
/// (GPT-2's 50,257 words: one window of 1,024 positions, not 128 whose logits are 26 GB); at
/// least 1. Pure.
int64_t evalBatchWindows(int64_t block_size, int64_t vocab);

/// evaluate's pass with any forward: `forward` maps a batch's input (on `device`) to its logits,
/// or to an undefined Variable on a rank that computes no logits (a pipeline stage before the
/// last), whose sums are then zero. No gradients. Collective over shard.reduce. A language model's
/// batches hold evalBatchWindows(block, vocab) windows.
EvalResult evaluateWith(const std::shared_ptr<data::Dataset>& ds, const EvalShard& shard, Device device,
                        const std::function<autograd::Variable(const Tensor& input)>& forward,
                        int64_t vocab = 0);

EvalResult evaluate(nn::Module& model, const std::shared_ptr<data::Dataset>& ds, comm::ProcessGroup* group,
                    int rank, int world, int64_t vocab = 0);

}  // namespace lockstep::train
