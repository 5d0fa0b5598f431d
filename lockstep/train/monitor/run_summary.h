#pragma once
// What a training run did, as runTraining returns it and DIR/summary.json records it: steps,
// throughput and where the time went, the test results, precision, and each rank's DDP timings
// and model-state memory.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/parallel/ddp/reducer.h"
#include "lockstep/parallel/memory_report.h"

namespace lockstep::train {

struct TrainSummary {
  /// Non-zero: this signal (SIGTERM, SIGINT, SIGHUP) stopped the run after `steps`, whose
  /// checkpoint it wrote; the run is not finished (no test, no model file, no summary.json).
  int stop_signal = 0;
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
  /// Of train_seconds, the time rank 0's training loop waited for batches (data loading, and the
  /// copy to a GPU where it was not ahead): summary.json's data_wait_seconds and, over
  /// train_seconds, data_wait_fraction.
  double data_wait_seconds = 0;
  double test_accuracy = 0;
  double test_loss = 0;
  /// Language models: tokens per sample (block_size; 0 otherwise) for tokens_per_second, the last
  /// validation loss (val_perplexity = exp of it), and the text sampled at the end.
  int64_t tokens_per_sample = 0;
  /// Language models: a training token's FLOPs (train/monitor/model_flops.h), and on a GPU whose
  /// dense bf16 peak is known, that peak and the GPU's name: summary.json's model_flops_per_second
  /// and mfu (over world_size GPUs at that peak).
  std::optional<double> flops_per_token;
  std::optional<double> peak_flops;
  std::string peak_gpu;
  std::optional<double> val_loss;
  nlohmann::json samples;
  /// A pipeline run's layout and bubble (summary.json's "pipeline"): stages, replicas, schedule,
  /// micro_batches, boundaries, theoretical_bubble, and per rank its stage, replica, measured
  /// idle_fraction (over the run's steps), activation_slots and peak_rss_bytes.
  nlohmann::json pipeline;
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
  /// Each rank's measured memory at the end of training (before the test), in rank order: the
  /// process's peak resident host memory, and on a GPU its caching allocator's peaks (torch's
  /// max_memory_allocated / max_memory_reserved) and what stays allocated between steps (the
  /// model states on the GPU, with the loader's batches and library workspaces). -1: no GPU.
  struct RankMemory {
    int64_t peak_rss_bytes = 0;
    int64_t gpu_allocated_peak_bytes = -1;
    int64_t gpu_reserved_peak_bytes = -1;
    int64_t gpu_allocated_between_steps_bytes = -1;
  };
  std::vector<RankMemory> measured_memory;
};
nlohmann::json toJson(const TrainSummary& s);

/// Collective over group: every rank's DDP timings, in rank order (TrainSummary::ddp_timings).
std::vector<parallel::ReducerTimings> gatherReducerTimings(comm::ProcessGroup& group,
                                                           const parallel::ReducerTimings& mine);

}  // namespace lockstep::train
