#pragma once
// The config's `pipeline` section: the model cut by layers into stages across the ranks and
// trained by a pipeline schedule (parallel/pipeline/, docs/pipeline.md), with DeepSpeed's key names
// (its `pipeline` section and PipelineModule's arguments):
//   stages                          pipeline stages; must divide the world size (data-parallel
//                                   replicas = world / stages, the data axis innermost)
//   partition_method                parameters (default), uniform or type:REGEX
//   boundaries                      explicit stage boundaries [0, b1, ..., L] instead
//   schedule                        1f1b (default, DeepSpeed's TrainSchedule), gpipe or
//                                   interleaved_1f1b (torch's ScheduleInterleaved1F1B)
//   virtual_stages                  chunks of layers per stage (interleaved_1f1b: >= 2; the
//                                   layers are cut into stages x virtual_stages parts)
//   activation_checkpoint_interval  layers per activation checkpoint (0: off)
// DeepSpeed's partition: best, seed_layers: false, pipe_partitioned and grad_partitioned are
// accepted with a note (no effect here). gradient_accumulation_steps is the micro-batch count, and
// train_batch_size = micro_batch * micro_batches * data-parallel size. Pure.
#include <cstdint>
#include <string>
#include <vector>

namespace YAML {
class Node;
}

namespace lockstep::train {

struct PipelineConfig {
  /// 0: no pipeline section (plain data parallel training).
  int64_t stages = 0;
  std::string partition_method = "parameters";
  std::vector<int64_t> boundaries;
  std::string schedule = "1f1b";
  int64_t virtual_stages = 1;
  int64_t activation_checkpoint_interval = 0;
  bool enabled() const { return stages > 0; }
};

/// Parses the `pipeline` mapping. ValueError naming "pipeline.KEY" for an unknown key (with the
/// nearest known one), a wrong type or value.
PipelineConfig parsePipelineConfig(const YAML::Node& node);

/// The data-parallel size a pipeline of `stages` leaves of `world` ranks. ValueError naming
/// pipeline.stages when they do not divide the world.
int64_t pipelineReplicas(int64_t stages, int64_t world);

}  // namespace lockstep::train
