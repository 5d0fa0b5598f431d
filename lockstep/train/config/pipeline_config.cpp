#include "lockstep/train/config/pipeline_config.h"

#include <yaml-cpp/yaml.h>

#include "lockstep/parallel/pipeline/schedule.h"
#include "lockstep/train/config/config_keys.h"
#include "lockstep/util/error.h"

namespace lockstep::train {

PipelineConfig parsePipelineConfig(const YAML::Node& n) {
  using config_keys::get;
  const std::string path = "pipeline";
  config_keys::checkKeys(
      n, path,
      {"stages", "partition_method", "boundaries", "schedule", "virtual_stages",
       "activation_checkpoint_interval", "partition", "seed_layers", "pipe_partitioned", "grad_partitioned"});
  PipelineConfig p;
  // DeepSpeed's own pipeline keys, at values that mean nothing different here.
  if (n["partition"]) {
    if (n["partition"].IsScalar() && n["partition"].Scalar() == "best")
      config_keys::note(
          "pipeline.partition: best: lockstep cuts the stages by pipeline.partition_method (" +
          (n["partition_method"] ? config_keys::describe(n["partition_method"]) : "parameters") + ")");
    else
      config_keys::refuse("pipeline.partition " + config_keys::describe(n["partition"]) +
                          ": lockstep cuts the stages by pipeline.partition_method (parameters, uniform or "
                          "type:REGEX) or pipeline.boundaries");
  }
  bool seed_layers = false;
  get(n, path, "seed_layers", seed_layers);
  if (seed_layers)
    config_keys::refuse(
        "pipeline.seed_layers: true (seeding each layer apart) is not supported; every rank "
        "builds the model from the config's seed, so the stages hold one model's values");
  for (const char* k : {"pipe_partitioned", "grad_partitioned"}) {
    bool on = false;
    get(n, path, k, on);
    if (n[k])
      config_keys::note(std::string("pipeline.") + k +
                        ": no effect: it splits what stages send each other across tensor-parallel ranks, "
                        "which lockstep has none of");
  }
  get(n, path, "stages", p.stages);
  get(n, path, "partition_method", p.partition_method);
  get(n, path, "schedule", p.schedule);
  get(n, path, "virtual_stages", p.virtual_stages);
  get(n, path, "activation_checkpoint_interval", p.activation_checkpoint_interval);
  if (n["boundaries"]) {
    if (!n["boundaries"].IsSequence())
      throw ValueError("pipeline.boundaries: expected a list of layer indices [0, b1, ..., L], got " +
                       config_keys::describe(n["boundaries"]));
    for (size_t i = 0; i < n["boundaries"].size(); ++i)
      p.boundaries.push_back(config_keys::convert<int64_t>(n["boundaries"][i],
                                                           "pipeline.boundaries[" + std::to_string(i) + "]"));
  }
  if (p.stages < 1)
    throw ValueError("pipeline.stages must be at least 1, got " + std::to_string(p.stages) +
                     " (remove the pipeline section for plain data-parallel training)");
  if (p.virtual_stages < 1)
    throw ValueError("pipeline.virtual_stages must be at least 1, got " + std::to_string(p.virtual_stages));
  const int64_t parts = p.stages * p.virtual_stages;
  if (!p.boundaries.empty() && static_cast<int64_t>(p.boundaries.size()) != parts + 1) {
    throw ValueError(
        "pipeline.boundaries has " + std::to_string(p.boundaries.size()) + " values but " +
        std::to_string(p.stages) + " stages" +
        (p.virtual_stages > 1 ? " x " + std::to_string(p.virtual_stages) + " virtual_stages" : "") +
        " need " + std::to_string(parts + 1) + " ([0, b1, ..., layers])");
  }
  if (p.activation_checkpoint_interval < 0)
    throw ValueError("pipeline.activation_checkpoint_interval must be >= 0 (0: off), got " +
                     std::to_string(p.activation_checkpoint_interval));
  const parallel::PipelineScheduleKind kind = parallel::parsePipelineSchedule(p.schedule);  // names the key
  if (kind == parallel::PipelineScheduleKind::interleaved_1f1b && p.virtual_stages < 2)
    throw ValueError(
        "pipeline.schedule interleaved_1f1b needs pipeline.virtual_stages >= 2 (chunks of layers "
        "per stage), got " +
        std::to_string(p.virtual_stages));
  if (kind != parallel::PipelineScheduleKind::interleaved_1f1b && p.virtual_stages != 1)
    throw ValueError("pipeline.virtual_stages is " + std::to_string(p.virtual_stages) + " but schedule " +
                     p.schedule + " runs one chunk per stage; use schedule: interleaved_1f1b");
  const std::string& m = p.partition_method;
  if (m != "parameters" && m != "uniform" && m.rfind("type:", 0) != 0)
    throw ValueError("pipeline.partition_method '" + m +
                     "' is unknown; use parameters, uniform or type:REGEX");
  return p;
}

int64_t pipelineReplicas(int64_t stages, int64_t world) {
  LOCKSTEP_ENFORCE(
      stages >= 1 && world % stages == 0, ValueError, "pipeline.stages is ", stages, " but the job has ",
      world, world == 1 ? " rank" : " ranks",
      ": the stages must divide the ranks (each of the world / stages data-parallel replicas runs "
      "every stage once; start the job with --nproc-per-node a multiple of pipeline.stages)");
  return world / stages;
}

}  // namespace lockstep::train
