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
// A ZeRO run writes a partitioned checkpoint instead (zero_checkpoint.h): each rank its own file
// of the parameter elements and optimizer states it owns, under zero/, and rank 0 the model's
// buffers (model_buffers.safetensors), state.json, config.json and, last, the manifest.
// A save writes .ckpt-<step>.tmp-*/ (each file fsynced, the manifest last), renames it into place,
// then replaces `latest` atomically, then prunes the run's own older checkpoints to keep_last, each
// renamed out of sight (.deleting-ckpt-<step>) before it is removed. A load verifies the manifest
// and every file before anything is decoded.
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lockstep/train/checkpoint/run_identity.h"
#include "lockstep/train/checkpoint/safetensors.h"

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
  /// Set by loadCheckpoint for a partitioned (ZeRO) checkpoint: the manifest's "zero" record
  /// ({"world_size", "stage", "rank_files"}). `model` then holds the model's buffers only and
  /// `optimizer` nothing: the parameters and optimizer states are in the ranks' files under
  /// `path`, read by zero_checkpoint.h. Null for a checkpoint of whole tensors.
  nlohmann::json zero;
  /// The checkpoint's directory (set by loadCheckpoint).
  std::string path;
};

struct CheckpointOptions {
  /// How many of this run's checkpoints (same run id) to keep, newest first; 0 keeps every one.
  /// Other runs' checkpoints and the one just written are never pruned.
  int keep_last = 0;
  /// Fault injection for tests of --max-restarts (saveZeroCheckpoint): at this step (> 0) the last
  /// rank exits with code 3 after writing its partition, before the manifest. 0: off.
  int64_t die_in_save_at_step = 0;
};

/// Saves into dir/ckpt-<data.step>/ (replacing a checkpoint of that step) and points dir/latest
/// at it. Returns the checkpoint's path. IoError naming the path when dir is not writable.
std::string saveCheckpoint(const std::string& dir, const CheckpointData& data,
                           const CheckpointOptions& opts = {});

/// The pieces of saveCheckpoint, for checkpoints whose files several processes write
/// (zero_checkpoint.h). A manifest's record of one file: {"bytes", "crc32"}.
nlohmann::json checkpointFileRecord(std::string_view bytes);
/// A fresh (emptied) temp directory for the checkpoint of `step` under dir; `tag` tells writers
/// apart (a process id). IoError naming the path when dir is not writable.
std::string makeCheckpointTempDir(const std::string& dir, int64_t step, const std::string& tag);
/// Writes the manifest into tmp, listing `files` (name relative to the checkpoint -> record) and
/// the extra keys of `layout` (e.g. {"zero": ...}), then moves tmp into place as dir/ckpt-<step>,
/// points dir/latest at it and prunes, as saveCheckpoint. The files must be complete and fsynced.
std::string commitCheckpoint(const std::string& dir, const std::string& tmp, int64_t step,
                             const RunIdentity& identity, const nlohmann::json& files,
                             const nlohmann::json& layout, const CheckpointOptions& opts);

/// What a verified manifest says.
struct CheckpointInfo {
  std::string path;
  int64_t step = 0;
  RunIdentity identity;
};

/// Verifies one checkpoint directory without decoding it: the manifest's own CRC-32, then the
/// size and CRC-32 of every file it lists (a partitioned checkpoint's rank files are streamed,
/// not held: every rank checks every file, so that all agree on which checkpoint verifies). IoError naming
/// the file and what is wrong (missing, truncated, tampered with, an unknown format) otherwise.
CheckpointInfo verifyCheckpoint(const std::string& ckpt_path);

/// Reads only the manifest (its own CRC-32 checked, the files not): cheap, for telling whose a
/// checkpoint is. IoError as verifyCheckpoint.
CheckpointInfo readCheckpointManifest(const std::string& ckpt_path);

/// Which tensors of a checkpoint of whole tensors a load keeps: a predicate on the names in
/// model.safetensors and one on those in optimizer.safetensors ("<parameter index>.<state>"); null
/// keeps every one. A pipeline stage resuming a DDP checkpoint reads its own layers' only. The
/// files are still verified whole (streamed), so every rank agrees on which checkpoint verifies. A
/// partitioned checkpoint's files are read by range anyway (zero_checkpoint.h): no selection there.
struct CheckpointSelection {
  std::function<bool(const std::string& name)> model;
  std::function<bool(const std::string& key)> optimizer;
};

/// Verifies (as verifyCheckpoint) and loads one checkpoint directory, of its tensors those `keep`
/// selects.
CheckpointData loadCheckpoint(const std::string& ckpt_path, const CheckpointSelection& keep = {});

/// The checkpoint directories (ckpt-<step>) under dir, newest (highest step) first.
std::vector<std::string> listCheckpoints(const std::string& dir);

/// Removes what interrupted saves and removals left in dir, none of it a checkpoint any listing
/// reads: .ckpt-<step>.tmp-* (a save that never committed), .deleting-* (a pruned checkpoint
/// whose removal was cut short) and .ckpt-<step>.old-* beside its ckpt-<step>. Returns the paths
/// removed. For the one process that writes dir's checkpoints, when no save is under way.
std::vector<std::string> removeUnfinishedCheckpoints(const std::string& dir);

/// The checkpoint dir/latest names, when it names a ckpt-<step> directory that exists.
std::optional<std::string> latestCheckpoint(const std::string& dir);

}  // namespace lockstep::train
