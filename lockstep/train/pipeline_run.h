#pragma once
// `lockstep train` with a `pipeline` section (config/pipeline_config.h, docs/pipeline.md): the
// world's ranks as a grid of stages x data-parallel replicas (parallel::makePipelineGrid), each
// rank training its stage of the model with a pipeline schedule over gradient_accumulation_steps
// micro-batches, its replicas' gradients averaged per stage, the gradient norm clipped over the
// whole model, checkpoints written per stage (checkpoint/pipeline_checkpoint.h), validation and
// test through the stages, and summary.json's "pipeline" with each rank's measured bubble.
#include "lockstep/train/trainer.h"

namespace lockstep::train {

/// runTraining for a config with a pipeline section: the same outputs (metrics, checkpoints,
/// DIR/model.safetensors from the last checkpoint, summary.json), rank 0 writing them. Collective:
/// every rank calls it. runTraining calls it with the config's GPU math options set
/// (backends.cudnn.allow_tf32, ...) and the rank's GPU current.
TrainSummary runPipelineTraining(const TrainConfig& config, const TrainerOptions& options);

}  // namespace lockstep::train
