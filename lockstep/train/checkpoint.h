#pragma once
// Checkpoints: one directory per save, written whole or not at all.
//   DIR/ckpt-<step>/model.safetensors      model parameters and buffers
//   DIR/ckpt-<step>/optimizer.safetensors  optimizer state tensors (momentum, exp_avg, ...)
//   DIR/ckpt-<step>/state.json             everything else (optimizer hyper-parameters, scheduler,
//                                          data position, RNG state, config) plus the size and
//                                          CRC-32 of both tensor files
//   DIR/latest                             the name of the newest complete checkpoint
// A save writes ckpt-<step>.tmp-*/ (each file fsynced), renames it into place, then replaces
// `latest` atomically, then prunes to keep_last. A load verifies sizes and checksums first.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/train/safetensors.h"

namespace lockstep::train {

struct CheckpointData {
  NamedTensors model;
  NamedTensors optimizer;
  /// Free-form: {"optimizer": ..., "scheduler": ..., "data": {"epoch", "step", "sampler"}, "rng": ...,
  /// "config": ...}. Stored verbatim in state.json under "state".
  nlohmann::json state = nlohmann::json::object();
  int64_t step = 0;
};

struct CheckpointOptions {
  int keep_last = 0;  // 0 keeps every checkpoint
};

/// Saves into dir/ckpt-<data.step>/ and points dir/latest at it. Returns the checkpoint's path.
/// IoError naming the path when dir is not writable.
std::string saveCheckpoint(const std::string& dir, const CheckpointData& data,
                           const CheckpointOptions& opts = {});

/// Loads one checkpoint directory, verifying sizes and checksums (IoError naming the file and
/// the mismatch when it was truncated or tampered with).
CheckpointData loadCheckpoint(const std::string& ckpt_path);

/// The checkpoints under dir, newest (highest step) first.
std::vector<std::string> listCheckpoints(const std::string& dir);

/// The newest checkpoint under dir that loads cleanly; a corrupt newer one is skipped with a
/// warning on stderr. nullopt when there is none.
std::optional<CheckpointData> loadLatestCheckpoint(const std::string& dir,
                                                   std::string* loaded_path = nullptr);

}  // namespace lockstep::train
