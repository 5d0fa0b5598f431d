#pragma once
// The config-driven training loop behind `lockstep train`: one call trains a zoo model as a
// TrainConfig says, on one rank or (started with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT) as one
// rank of a DistributedDataParallel job.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/train/config/config.h"
#include "lockstep/train/monitor/run_summary.h"

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
  /// With crash_after_step: only this rank exits (a stage or a replica killed alone); -1: every rank.
  int crash_rank = -1;
  /// Fault injection likewise: in the ZeRO checkpoint of this step (> 0) the last rank dies after
  /// writing its partition (CheckpointOptions::die_in_save_at_step). 0: off.
  int64_t die_in_zero_save_at_step = 0;
};

/// Creates dir (and parents) and checks a file can be written there; ValueError naming the dir
/// otherwise.
void prepareOutputDir(const std::string& dir);
/// The same for another directory a run writes, `what` naming it in the errors (e.g. "checkpoint.dir").
void prepareWritableDir(const std::string& dir, const std::string& what);

/// Trains to the end (epochs or max_steps). Collective under DDP: every rank calls it. Rank 0
/// writes checkpoints, metrics, DIR/model.safetensors and DIR/summary.json; every rank loads a
/// checkpoint when resuming. Steps, sample order and parameters are bitwise those of an
/// uninterrupted run of the same world size when resumed. SIGTERM, SIGINT or SIGHUP from the first
/// step on stops every rank after the same step, with that step's checkpoint, and returns with
/// TrainSummary::stop_signal set (stop_signals.h).
TrainSummary runTraining(const TrainConfig& config, const TrainerOptions& options);

}  // namespace lockstep::train
