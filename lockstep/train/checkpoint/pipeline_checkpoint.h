#pragma once
// A pipeline run's checkpoints (docs/checkpoints.md, "Pipeline checkpoints"): written per stage,
// nothing gathered. The first replica of each stage writes its stage's parameters (a tied one by
// its first holder only) with their optimizer state as a partition file,
//   ckpt-<step>/pipeline/stage-<s>-of-<S>.safetensors
// (with ZeRO stage 1 over the replicas every replica writes its partition of the stage,
//   ckpt-<step>/pipeline/stage-<s>-of-<S>-zero-<r>-of-<R>.safetensors)
// in the ZeRO partition format (zero_checkpoint.h), whole parameters as single segments numbered as
// the whole model's optimizer numbers them; rank 0 writes the model's buffers (each stage's own,
// collected from the stages), state.json, config.json and the manifest ("zero" lists the stage
// files, "pipeline" the layout). So a pipeline checkpoint is a partitioned checkpoint like any
// other: `lockstep checkpoint consolidate` makes it one model file, and it resumes a pipeline of any
// stage count, a DDP run or a ZeRO run; a pipeline resumes from any of theirs too.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lockstep/comm/process_group.h"
#include "lockstep/data/data_loader.h"
#include "lockstep/nn/module.h"
#include "lockstep/optim/loss_scaler.h"
#include "lockstep/optim/lr_scheduler.h"
#include "lockstep/optim/optimizer.h"
#include "lockstep/parallel/pipeline/pipeline_stage.h"
#include "lockstep/parallel/zero/optimizer.h"
#include "lockstep/tensor/generator.h"
#include "lockstep/train/checkpoint/checkpoint.h"

namespace lockstep::train {

/// The whole model's optimizer layout: its parameter groups (the flat order numbers the parameters
/// in checkpoints) and their options. A stage's optimizer has the same groups, each holding the
/// stage's members of the whole group (possibly none).
struct WholeOptimizerLayout {
  std::vector<std::vector<autograd::Variable>> groups;
  std::vector<optim::HyperParams> options;
  /// Each parameter's state-dict name and whole index (flat order over the groups).
  std::vector<std::string> names;
  std::unordered_map<const autograd::VariableImpl*, int64_t> index;
};
/// The layout of `whole`, an optimizer over every parameter of `model`.
WholeOptimizerLayout wholeOptimizerLayout(const optim::Optimizer& whole, const nn::Module& model);

/// Borrowed parts of one rank of a pipeline run.
struct PipelineCheckpointParts {
  nn::Module* model = nullptr;  // the whole model (every rank builds it)
  parallel::PipelineStage* stage = nullptr;
  optim::Optimizer* optimizer = nullptr;  // the stage's (groups as the layout's)
  /// ZeRO stage 1 over the stage's replicas (its optimizer is `optimizer`), or nullptr.
  parallel::ZeroOptimizer* zero = nullptr;
  /// fp16's loss scaler, or nullptr.
  optim::LossScaler* loss_scaler = nullptr;
  const WholeOptimizerLayout* layout = nullptr;
  optim::LRScheduler* scheduler = nullptr;
  data::DataLoader* loader = nullptr;
  Generator* rng = nullptr;
  nlohmann::json config = nlohmann::json::object();
  /// The data-parallel size (the loader's shards) and this rank's replica.
  int64_t replicas = 1, replica = 0;
  /// Every rank of the job.
  comm::ProcessGroup* world = nullptr;
};

/// Collective over parts.world: writes the checkpoint of `step` as above. Returns its path (on
/// every rank). IoError on every rank when any rank could not write its part.
std::string savePipelineCheckpoint(const std::string& dir, const PipelineCheckpointParts& parts, int64_t step,
                                   const RunIdentity& identity, const CheckpointOptions& opts);

/// What this stage loads of a checkpoint of whole tensors (a DDP run's): its layers' tensors and
/// their optimizer state, for loadCheckpoint (a partitioned checkpoint is read by range anyway).
/// The predicates hold their own copies: they outlive `parts`' call but not its model.
CheckpointSelection pipelineCheckpointSelection(const PipelineCheckpointParts& parts);

/// Loads a checkpoint of any kind (pipeline, ZeRO or DDP, of any stage count or world size) into
/// this rank: the stage's layers' values, this stage's optimizer state, the scheduler, the loader's
/// position (rescaled to this run's replicas and batch) and the generator. Not collective. Returns
/// restoreTrainingState's note (a rescaled data position) or "".
std::string restorePipelineCheckpoint(const CheckpointData& data, const PipelineCheckpointParts& parts);

}  // namespace lockstep::train
