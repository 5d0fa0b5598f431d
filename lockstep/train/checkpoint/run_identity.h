#pragma once
// Which run wrote a checkpoint, and whether another run may resume from it (docs/checkpoints.md).
// A run is compatible with a checkpoint when it trains the same thing: the same config (less the
// keys that say how long, how often and where: TrainConfig::identity_hash) and the same seed. The
// world and batch sizes may differ: a resume then follows the elastic rules of
// restoreTrainingState (training_state.h).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace lockstep::train {

struct RunIdentity {
  /// Made when a run starts afresh (newRunId); a run that resumes a checkpoint keeps its id.
  std::string run_id;
  /// TrainConfig::identity_hash of the config that trains it.
  std::string config_hash;
  uint64_t seed = 0;
  int64_t world_size = 1;
  int64_t train_batch_size = 0;
  int64_t micro_batch_size = 0;
  int64_t gradient_accumulation_steps = 1;
};

nlohmann::json toJson(const RunIdentity& id);
/// IoError (naming `where`) when a field is missing or of the wrong type.
RunIdentity runIdentityFromJson(const nlohmann::json& j, const std::string& where);

/// A fresh run id: 16 random hex digits.
std::string newRunId();

/// Why a run `now` may not resume a checkpoint written by `ckpt` automatically ("the config
/// differs (...)", "the seed differs (...)"), or empty when it may.
std::string incompatibility(const RunIdentity& ckpt, const RunIdentity& now);

/// One line for messages: "run 1a2b..., config 89ab12cd, seed 1, world size 2, batch 32".
std::string describe(const RunIdentity& id);

}  // namespace lockstep::train
