#pragma once
// Checkpoints: one directory per save, written whole or not at all (docs/checkpoints.md).
//   DIR/ckpt-<step>/model.safetensors      model parameters and buffers
//   DIR/ckpt-<step>/optimizer.safetensors  optimizer state tensors (momentum, exp_avg, ...)
//   DIR/ckpt-<step>/state.json             everything else (optimizer hyper-parameters, scheduler,
//                                          data position, RNG state)
//   DIR/ckpt-<step>/config.json            the config that trained it
//   DIR/ckpt-<step>/manifest.json          written last: the format, the step, the identity of the
//                                          run (run_identity.h), and the size and CRC-32 of every
//                                          file above; itself covered by a CRC-32
//   DIR/latest                             the name of the newest complete checkpoint
// A save writes .ckpt-<step>.tmp-*/ (each file fsynced, the manifest last), renames it into place,
// then replaces `latest` atomically, then prunes the run's own older checkpoints to keep_last. A
// load verifies the manifest and every file before anything is decoded.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/train/run_identity.h"
#include "lockstep/train/safetensors.h"

namespace lockstep::train {

struct CheckpointData {
  NamedTensors model;
  NamedTensors optimizer;
  /// Free-form: {"optimizer": ..., "scheduler": ..., "data": {"epoch", "position", ...}, "rng": ...}.
  /// Stored verbatim in state.json under "state".
  nlohmann::json state = nlohmann::json::object();
  /// The config that trained it, stored verbatim in config.json.
  nlohmann::json config = nlohmann::json::object();
  RunIdentity identity;
  int64_t step = 0;
};

struct CheckpointOptions {
  /// How many of this run's checkpoints (same run id) to keep, newest first; 0 keeps every one.
  /// Other runs' checkpoints and the one just written are never pruned.
  int keep_last = 0;
};

/// Saves into dir/ckpt-<data.step>/ (replacing a checkpoint of that step) and points dir/latest
/// at it. Returns the checkpoint's path. IoError naming the path when dir is not writable.
std::string saveCheckpoint(const std::string& dir, const CheckpointData& data,
                           const CheckpointOptions& opts = {});

/// What a verified manifest says.
struct CheckpointInfo {
  std::string path;
  int64_t step = 0;
  RunIdentity identity;
};

/// Verifies one checkpoint directory without decoding it: the manifest's own CRC-32, then the
/// size and CRC-32 of every file it lists. IoError naming the file and what is wrong (missing,
/// truncated, tampered with, an unknown format) otherwise.
CheckpointInfo verifyCheckpoint(const std::string& ckpt_path);

/// Reads only the manifest (its own CRC-32 checked, the files not): cheap, for telling whose a
/// checkpoint is. IoError as verifyCheckpoint.
CheckpointInfo readCheckpointManifest(const std::string& ckpt_path);

/// Verifies (as verifyCheckpoint) and loads one checkpoint directory.
CheckpointData loadCheckpoint(const std::string& ckpt_path);

/// The checkpoint directories (ckpt-<step>) under dir, newest (highest step) first.
std::vector<std::string> listCheckpoints(const std::string& dir);

/// The checkpoint dir/latest names, when it names a ckpt-<step> directory that exists.
std::optional<std::string> latestCheckpoint(const std::string& dir);

}  // namespace lockstep::train
