#pragma once
// The config-driven training loop behind `lockstep train`: one call trains a zoo model as a
// TrainConfig says, on one rank or (started with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT) as one
// rank of a DistributedDataParallel job.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/parallel/ddp/reducer.h"
#include "lockstep/train/config/config.h"

namespace lockstep::train {

struct TrainerOptions {
  std::string output_dir = "lockstep-out";
  /// Continue from the checkpoint dir's newest valid checkpoint of this run or a compatible one
  /// (resume.h); none: start fresh.
  bool resume = false;
  /// With resume: the user asked for it (--resume), so finding only other runs' checkpoints is an
  /// error (a restarted worker starts fresh then).
  bool resume_required = false;
  /// --resume-from: a checkpoint (or a dir of them) to start from on purpose, whatever run wrote it.
  std::string resume_from;
  /// Stored in every checkpoint's config.json with the config document (what produced it).
  nlohmann::json config_json = nlohmann::json::object();
  /// Fault injection for tests of --max-restarts: after the checkpoint of this step (> 0), the
  /// process exits with code 3 as if it had crashed. 0: off.
  int64_t crash_after_step = 0;
  /// Fault injection likewise: in the ZeRO checkpoint of this step (> 0) the last rank dies after
  /// writing its partition (CheckpointOptions::die_in_save_at_step). 0: off.
  int64_t die_in_zero_save_at_step = 0;
};

struct TrainSummary {
  int world_size = 1;
  int64_t epochs = 0;  // epochs started
  int64_t steps = 0;   // optimizer steps, in all (resumed runs included)
  int64_t global_batch_size = 0;
  /// All ranks' training samples of this process's run over train_seconds.
  double samples_per_second = 0;
  /// Time spent training (data loading, forward, backward, optimizer), without evaluation and
  /// checkpoint writes, which are counted apart; wall_seconds is all of it.
  double train_seconds = 0;
  double eval_seconds = 0;
  double checkpoint_seconds = 0;
  double wall_seconds = 0;
  double test_accuracy = 0;
  double test_loss = 0;
  /// Language models: tokens per sample (block_size; 0 otherwise) for tokens_per_second, the last
  /// validation loss (val_perplexity = exp of it), and the text sampled at the end.
  int64_t tokens_per_sample = 0;
  std::optional<double> val_loss;
  nlohmann::json samples;
  /// activation_checkpointing.profile: autograd::checkpointProfile() at the end.
  nlohmann::json checkpoint_profile;
  /// "fp32", "bf16" or "fp16", and how the kernels computed it here (kernels::precisionPath, e.g.
  /// "bf16 native (oneDNN avx512_core_bf16)").
  std::string precision = "fp32";
  std::string precision_path;
  /// fp16's loss scale at the end and the optimizer steps skipped for an overflow (DeepSpeed's
  /// skipped_steps); written when the run scaled its loss.
  bool has_loss_scale = false;
  double loss_scale = 1;
  int64_t skipped_steps = 0;
  /// DDP's timings of this run, one entry per rank in rank order (empty on one rank): where each
  /// rank's steps went, to spot a straggler (see DistributedDataParallel::timings).
  std::vector<parallel::ReducerTimings> ddp_timings;
  /// Each rank's bytes of parameters, gradients and optimizer states, in rank order (the memory
  /// report, parallel/memory_report.h): summary.json's "memory".
  std::vector<parallel::ModelStateBytes> memory;
};
nlohmann::json toJson(const TrainSummary& s);

/// Creates dir (and parents) and checks a file can be written there; ValueError naming the dir
/// otherwise.
void prepareOutputDir(const std::string& dir);

/// Trains to the end (epochs or max_steps). Collective under DDP: every rank calls it. Rank 0
/// writes checkpoints, metrics, DIR/model.safetensors and DIR/summary.json; every rank loads a
/// checkpoint when resuming. Steps, sample order and parameters are bitwise those of an
/// uninterrupted run of the same world size when resumed.
TrainSummary runTraining(const TrainConfig& config, const TrainerOptions& options);

}  // namespace lockstep::train
