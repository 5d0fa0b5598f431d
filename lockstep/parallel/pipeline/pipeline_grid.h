#pragma once
// Pipeline x data parallel: the world's ranks as a grid of `stages` pipeline stages by `replicas`
// data-parallel replicas, DeepSpeed's PipeDataParallelTopology (axes pipe, data; the data axis
// innermost): rank = stage * replicas + replica. Each replica is one pipeline (its stages in stage
// order form a pipe group); each stage's replicas form a data group over which that stage's
// gradients are averaged after the schedule (PipelineStageOptions::data_group), as DeepSpeed's
// pipeline engine reduces them once per step.
#include <cstdint>
#include <memory>

#include "lockstep/comm/process_group.h"

namespace lockstep::parallel {

struct PipelineGrid {
  int64_t stages = 1, replicas = 1;
  int64_t stage = 0, replica = 0;
  /// This rank's pipeline: the ranks {replica, replica + replicas, ...}, group rank = stage.
  std::shared_ptr<comm::ProcessGroup> pipe;
  /// This rank's stage's replicas: the ranks [stage * replicas, (stage + 1) * replicas), group rank
  /// = replica.
  std::shared_ptr<comm::ProcessGroup> data;
};

/// Splits `world` into the grid. Collective over world (every rank makes every sub-group, in one
/// order). ValueError naming pipeline.stages when it does not divide the world size.
PipelineGrid makePipelineGrid(comm::ProcessGroup& world, int64_t stages);

}  // namespace lockstep::parallel
