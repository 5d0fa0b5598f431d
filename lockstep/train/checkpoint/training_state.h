#pragma once
// What a training job saves and restores, on top of the checkpoint files (checkpoint.h): the
// model's state dict, the optimizer's state (tensors + hyper-parameters), the scheduler's counter,
// the data position (epoch and batches consumed), the random generator and the config.
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "lockstep/data/data_loader.h"
#include "lockstep/nn/module.h"
#include "lockstep/optim/loss_scaler.h"
#include "lockstep/optim/lr_scheduler.h"
#include "lockstep/optim/optimizer.h"
#include "lockstep/parallel/zero/optimizer.h"
#include "lockstep/tensor/generator.h"
#include "lockstep/train/checkpoint/checkpoint.h"

namespace lockstep::parallel {
class Engine;
}

namespace lockstep::train {

/// Borrowed parts of a job; any but model may be null.
struct TrainingParts {
  nn::Module* model = nullptr;
  optim::Optimizer* optimizer = nullptr;
  optim::LRScheduler* scheduler = nullptr;
  data::DataLoader* loader = nullptr;
  Generator* rng = nullptr;
  nlohmann::json config = nlohmann::json::object();
  /// The job's world size: with the loader's batch size it says which samples a data position
  /// covers (every rank's shard takes every world_size-th sample of the epoch's order).
  int64_t world_size = 1;
  /// fp16's loss scaler (scale, hysteresis, counters), or nullptr when the job has none.
  optim::LossScaler* loss_scaler = nullptr;
  /// ZeRO (each rank's optimizer holds its partition): checkpoints are partitioned
  /// (zero_checkpoint.h). captureTrainingState then leaves out the parameters and the optimizer's
  /// tensors (each rank writes its own with saveZeroCheckpoint), and restoreTrainingState loads
  /// this rank's partition of the optimizer state, from a partitioned checkpoint of any world
  /// size and stage or from a DDP one.
  parallel::ZeroOptimizer* zero = nullptr;
  /// When set, restoreTrainingState reads and loads only the model's keys it accepts (a pipeline
  /// stage's), each of which the checkpoint must hold; the others are left as they are (a
  /// partitioned checkpoint's other parameters are not even read). Unset: the whole model, strict.
  std::function<bool(const std::string& key)> model_keys{};
};

/// Hyper-parameters (an optimizer group's options, a scheduler's or loss scaler's state) as
/// state.json holds them, and back (booleans, integers and reals keep their kind).
nlohmann::json hyperToJson(const optim::HyperParams& h);
optim::HyperParams hyperFromJson(const nlohmann::json& j);

/// The parts at global step `step` (identity left for the caller). The tensors alias the live
/// model's and optimizer's (no copy of either in memory): write the checkpoint before the next
/// step changes them.
CheckpointData captureTrainingState(const TrainingParts& parts, int64_t step);
/// Loads a snapshot into the parts; a partitioned checkpoint's parameters and optimizer state
/// are read from its rank files (zero_checkpoint.h), resharded. The model load is strict: a model
/// with other names or shapes fails with the list of mismatches (ValueError), and nothing is
/// changed then.
/// A snapshot taken mid-epoch by a job of another world size or batch size (an elastic restart)
/// resumes at the batch whose samples follow the ones consumed: the ranks' shards interleave, so
/// the first position x batch_size x world_size samples of the epoch's order are the consumed
/// ones. Where that count is not a whole number of the new job's batches, the position rounds
/// down (up to one global batch is seen twice, none is skipped). Returns a line for the log
/// when that happened; empty otherwise.
std::string restoreTrainingState(const CheckpointData& data, TrainingParts& parts);

/// The model's state dict as one safetensors file (atomic write), loadable by Python's safetensors.
void saveModel(const std::string& path, const nn::Module& model);
/// The same file from the model an engine trains, whatever its ZeRO stage: collective. When its
/// parameters are partitioned (stage 3) they are gathered one bucket at a time
/// (Engine::forEachWholeParameterBucket) and the rank with write = true puts each into the file as
/// it arrives, so the whole model is never in memory; otherwise that rank writes saveModel's file.
void saveModel(const std::string& path, parallel::Engine& engine, bool write);
/// Module-only load from a safetensors file (e.g. a final model or a checkpoint's
/// model.safetensors). strict as in Module::loadStateDict.
void loadModel(const std::string& path, nn::Module& model, bool strict = true);

}  // namespace lockstep::train
