#include "lockstep/train/config/deepspeed_keys.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <functional>
#include <vector>

#include "lockstep/train/config/config_keys.h"

namespace lockstep::train::deepspeed_keys {

namespace {

using Accepts = std::function<bool(const YAML::Node&)>;

struct Entry {
  std::string section, key;
  Accepts accepts;      // the value DeepSpeed's default or off value (or one with no effect here)
  std::string off;      // how to write the accepted value, for the refusal's advice
  std::string feature;  // what the key turns on, which lockstep lacks
};

bool isBool(const YAML::Node& v, bool want) {
  bool b;
  return config_keys::isPlainScalar(v) && YAML::convert<bool>::decode(v, b) && b == want;
}
Accepts boolean(bool want) {
  return [want](const YAML::Node& v) { return isBool(v, want); };
}
Accepts anyBoolean() {
  return [](const YAML::Node& v) { return isBool(v, true) || isBool(v, false); };
}
Accepts number(double want) {
  return [want](const YAML::Node& v) {
    double d;
    return config_keys::isPlainScalar(v) && YAML::convert<double>::decode(v, d) && d == want;
  };
}
Accepts positive() {
  return [](const YAML::Node& v) {
    double d;
    return config_keys::isPlainScalar(v) && YAML::convert<double>::decode(v, d) && std::isfinite(d) && d > 0;
  };
}
Accepts text(const std::set<std::string>& words) {
  return [words](const YAML::Node& v) { return v.IsScalar() && words.count(v.Scalar()) > 0; };
}
Accepts null() {
  return [](const YAML::Node& v) { return v.IsNull(); };
}
// A section DeepSpeed switches on with `enabled: true` (default false); the rest of a disabled
// section is ignored, as DeepSpeed ignores it.
Accepts offSection() {
  return [](const YAML::Node& v) {
    if (v.IsNull()) return true;
    return v.IsMap() && (!v["enabled"] || isBool(v["enabled"], false));
  };
}
// A section with no off switch: only an empty one is off.
Accepts emptySection() {
  return [](const YAML::Node& v) { return v.IsNull() || (v.IsMap() && v.size() == 0); };
}
Accepts anything() {
  return [](const YAML::Node&) { return true; };
}

const std::vector<Entry>& table() {
  static const std::vector<Entry> entries = {
      // Top level (runtime/constants.py, runtime/config.py).
      {"", "amp", offSection(), "{enabled: false}", "Apex AMP mixed precision; use bf16 or fp16"},
      {"", "flops_profiler", offSection(), "{enabled: false}", "the FLOPs profiler"},
      {"", "wandb", offSection(), "{enabled: false}", "Weights & Biases logging"},
      {"", "comet", offSection(), "{enabled: false}", "Comet logging"},
      {"", "comms_logger", offSection(), "{enabled: false}", "the communication logger"},
      {"", "autotuning", offSection(), "{enabled: false}", "autotuning"},
      {"", "elasticity", offSection(), "{enabled: false}", "elastic batch sizes"},
      {"", "curriculum_learning", offSection(), "{enabled: false}", "curriculum learning"},
      {"", "data_efficiency", offSection(), "{enabled: false}",
       "data efficiency (data sampling and routing)"},
      {"", "nebula", offSection(), "{enabled: false}", "Nebula checkpointing"},
      {"", "hybrid_engine", offSection(), "{enabled: false}", "the hybrid engine (RLHF generation)"},
      {"", "sparse_attention", emptySection(), "absent", "sparse attention"},
      {"", "compression_training", emptySection(), "absent", "compression training"},
      {"", "aio", anything(), "",
       "no effect: aio tunes DeepSpeed's libaio NVMe I/O; lockstep's NVMe swap files use "
       "their own reads and writes"},
      {"", "zero_force_ds_cpu_optimizer", anyBoolean(), "true or false",
       "no effect: lockstep's optimizers are its own on every device"},
      {"", "communication_data_type", null(), "null",
       "communicating gradients in another dtype (ddp.comm_hook bf16_compress or fp16_compress compresses "
       "DDP's buckets)"},
      // Where the division by the world size happens changes only rounding where the gradients are
      // f32 when they are reduced: the fp16 overflow these guard against cannot happen. fp16 at ZeRO
      // stages 1-3 would reduce f16 gradients; asking for these keeps f32 ones there
      // (config.cpp's useMasterWeights).
      {"", "prescale_gradients", anyBoolean(), "true or false",
       "no effect: lockstep averages f32 gradients, so dividing them before the allreduce (DeepSpeed's guard "
       "against fp16 overflow in the sum) changes only rounding (with fp16 at ZeRO stages 1-3, true keeps "
       "f32 parameters and gradients rather than f16 ones); ddp.comm_hook fp16_compress divides "
       "first, as PyTorch's hook does"},
      {"", "gradient_predivide_factor", positive(), "a positive number",
       "no effect: lockstep averages f32 gradients, so splitting the division by the world size around the "
       "allreduce (DeepSpeed's guard against fp16 overflow in the sum) changes only rounding (with fp16 at "
       "ZeRO stages 1-3, a factor other than 1 keeps f32 parameters and gradients rather than f16 ones)"},
      {"", "gradient_allreduce_op", text({"mean"}), "mean",
       "summing gradients across ranks instead of averaging them (gradient_allreduce_op: sum)"},
      {"", "managed_gradient_accumulation", boolean(true), "true",
       "client-managed accumulation boundaries (lockstep's loop steps the optimizer at every boundary)"},
      {"", "seq_parallel_communication_data_type", anything(), "",
       "no effect: it sets the dtype of sequence-parallel communication, and lockstep has no sequence "
       "parallelism"},
      {"", "tensor_parallel",
       [](const YAML::Node& v) {
         if (v.IsNull() || (v.IsMap() && v.size() == 0)) return true;
         return v.IsMap() && v["autotp_size"] && number(0)(v["autotp_size"]);
       },
       "{autotp_size: 0}", "tensor parallelism (AutoTP)"},
      {"", "expert_parallel", offSection(), "{enabled: false}", "expert parallelism (AutoEP)"},
      {"", "compile",
       [](const YAML::Node& v) {
         return v.IsNull() || (v.IsMap() && (!v["deepcompile"] || isBool(v["deepcompile"], false)));
       },
       "{deepcompile: false}", "DeepCompile"},
      {"", "eigenvalue", offSection(), "{enabled: false}", "eigenvalue computation (for MoQ)"},
      {"", "quantize_training", anything(), "",
       "no effect: DeepSpeed reads it only with compression_training's weight quantization, which lockstep "
       "lacks"},
      {"", "progressive_layer_drop", offSection(), "{enabled: false}", "progressive layer dropping"},
      {"", "weight_quantization", emptySection(), "absent", "weight quantization"},
      {"", "datastates_ckpt", emptySection(), "absent", "DataStates asynchronous checkpointing"},
      {"", "timers", anything(), "",
       "no effect: DeepSpeed's throughput timer; lockstep's progress prints samples/s and summary.json "
       "holds the step times"},
      {"", "log_level", anything(), "", "no effect: lockstep's log has no levels"},
      {"", "dataloader_drop_last", boolean(false), "false",
       "dropping the last incomplete batch of DeepSpeed's data loader"},
      {"", "use_data_before_expert_parallelism", boolean(false), "false",
       "data-before-expert-parallel process groups"},
      {"", "sparse_gradients", boolean(false), "false", "sparse embedding gradients"},
      {"", "wall_clock_breakdown", boolean(false), "false",
       "the wall-clock breakdown of forward, backward and step (progress prints step times)"},
      {"", "memory_breakdown", boolean(false), "false",
       "the memory breakdown (the run prints model-state bytes)"},
      {"", "dump_state", boolean(false), "false", "dumping the engine's state"},
      {"", "fp32_allreduce", boolean(false), "false", "allreduce in fp32 under bf16 or fp16"},
      {"", "graph_harvesting", boolean(false), "false", "graph harvesting (use cuda_graph)"},
      {"", "disable_allgather", boolean(false), "false", "disabling ZeRO's allgather"},
      {"", "load_universal_checkpoint", boolean(false), "false", "loading DeepSpeed universal checkpoints"},
      {"", "cuda_visible_devices", anything(), "",
       "no effect: DeepSpeed reads no such key either; GPUs are chosen by CUDA_VISIBLE_DEVICES in the "
       "environment"},
      {"", "data_types",
       [](const YAML::Node& v) {
         if (v.IsNull()) return true;
         if (!v.IsMap()) return false;
         for (const auto& kv : v) {
           const std::string k = kv.first.as<std::string>();
           // fp32 is what lockstep does: gradients accumulate in f32 (with bf16/fp16 at ZeRO stages
           // 1-3 it keeps f32 parameters for that: config.cpp's useMasterWeights).
           if (k != "grad_accum_dtype" || !(kv.second.IsNull() || kv.second.Scalar() == "fp32")) return false;
         }
         return true;
       },
       "{grad_accum_dtype: fp32}",
       "a gradient accumulation dtype named other than fp32 (leave it null: gradients accumulate in f32, "
       "or with bf16/fp16 at ZeRO stages 1-3 in the model's dtype as DeepSpeed's default does; fp32 keeps "
       "them f32 there too)"},
      // optimizer (runtime/config.py LEGACY_FUSION).
      {"optimizer", "legacy_fusion", boolean(false), "false", "DeepSpeed's legacy fused fp16 optimizer"},
      // checkpoint: DeepSpeed's keys beside lockstep's own (runtime/model_checkpointing/config.py).
      {"checkpoint", "tag_validation", anything(), "",
       "no effect: lockstep checks every checkpoint against its manifest of checksums and its run identity "
       "on every rank (docs/checkpoints.md)"},
      {"checkpoint", "load_universal", boolean(false), "false", "loading DeepSpeed universal checkpoints"},
      {"checkpoint", "use_node_local_storage", boolean(false), "false",
       "node-local checkpoint storage (every node writing its own copy)"},
      {"checkpoint", "parallel_write",
       [](const YAML::Node& v) {
         return v.IsNull() || (v.IsMap() && (!v["pipeline_stage"] || isBool(v["pipeline_stage"], false)));
       },
       "{pipeline_stage: false}", "writing checkpoints in parallel by pipeline stage"},
      {"checkpoint", "serialization", boolean(true), "true", "checkpoints without torch serialization"},
      {"checkpoint", "writer", null(), "null", "DeepSpeed's fast checkpoint writers"},
      // bf16 (runtime/precision_config.py).
      {"bf16", "immediate_grad_update", boolean(false), "false",
       "applying bf16 gradients to the master weights as they are produced"},
      // zero_optimization (runtime/zero/config.py).
      {"zero_optimization", "load_from_fp32_weights", boolean(true), "true",
       "rebuilding f32 weights from 16-bit ones at load (lockstep's checkpoints hold the master weights "
       "themselves)"},
      {"zero_optimization", "elastic_checkpoint", boolean(false), "false", "elastic checkpoints"},
      {"zero_optimization", "ignore_unused_parameters", boolean(true), "true",
       "refusing parameters that get no gradient"},
      {"zero_optimization", "legacy_stage1", boolean(false), "false", "DeepSpeed's legacy stage 1"},

      {"zero_optimization", "cpu_offload_use_pin_memory", anyBoolean(), "true or false",
       "no effect: DeepSpeed's deprecated key, which it ignores (offload_optimizer.pin_memory and "
       "offload_param.pin_memory say whether to pin)"},
      {"zero_optimization", "zero_hpz_partition_size", number(1), "1", "ZeRO++ hierarchical partitioning"},
      {"zero_optimization", "zero_quantized_weights", boolean(false), "false", "ZeRO++ quantized weights"},
      {"zero_optimization", "zero_quantized_nontrainable_weights", boolean(false), "false",
       "ZeRO++ quantized non-trainable weights"},
      {"zero_optimization", "zero_quantized_gradients", boolean(false), "false",
       "ZeRO++ quantized gradients"},
      {"zero_optimization", "mics_shard_size", number(-1), "-1", "MiCS sharding"},
      {"zero_optimization", "mics_hierarchical_params_gather", boolean(false), "false",
       "MiCS hierarchical gathering"},
      {"zero_optimization", "memory_efficient_linear", anyBoolean(), "true or false",
       "no effect: DeepSpeed's memory-efficient linear of ZeRO-3 only saves activation memory; lockstep's "
       "linear layers keep their inputs as usual"},
      {"zero_optimization", "pipeline_loading_checkpoint", boolean(false), "false",
       "pipelined checkpoint loading"},
      {"zero_optimization", "override_module_apply", boolean(true), "true",
       "overriding Module.apply for ZeRO-3 (lockstep's initialisers see whole parameters)"},
      {"zero_optimization", "use_all_reduce_for_fetch_params", boolean(false), "false",
       "fetching ZeRO-3 parameters by allreduce"},
      {"zero_optimization", "stage3_module_granularity_threshold", number(0), "0",
       "ZeRO-3 leaf-module granularity"},
      {"zero_optimization", "log_trace_cache_warnings", boolean(false), "false",
       "ZeRO-3 trace cache warnings"},
      {"zero_optimization", "use_multi_rank_bucket_allreduce", boolean(true), "true",
       "the multi-rank bucket allreduce"},
      {"zero_optimization", "grad_hooks", boolean(true), "true",
       "reducing stage 1's gradients after backward instead of during it (lockstep reduces them during "
       "backward, through DDP's buckets)"},
      {"zero_optimization", "stage3_model_persistence_threshold", number(9223372036854775807.0),
       "9223372036854775807 (sys.maxsize)", "a cap on the elements ZeRO-3 keeps unpartitioned"},
      {"zero_optimization", "stage3_allgather_sequential", boolean(false), "false",
       "ZeRO-3 all-gathers of one parameter at a time"},
      {"zero_optimization", "zenflow", null(), "null", "ZenFlow (stall-free offloaded optimizer steps)"},
      {"zero_optimization", "zeropp_loco_param", null(), "null", "LoCo-ZeRO++ error feedback"},
      {"zero_optimization", "enable_sanity_checks", boolean(false), "false", "ZeRO's internal sanity checks"},
      {"zero_optimization", "save_muon_momentum_buffer_in_memory", anyBoolean(), "true or false",
       "no effect: it places the Muon optimizer's momentum, and lockstep has no Muon"},
      {"zero_optimization", "leaf_module", emptySection(), "absent", "chosen ZeRO-3 leaf modules"},
      // zero_optimization.offload_optimizer (runtime/zero/offload_config.py).
      {"zero_optimization.offload_optimizer", "super_offload", boolean(false), "false", "SuperOffload"},
      {"zero_optimization.offload_optimizer", "cpuadam_cores_perc", anything(), "",
       "no effect: it sizes DeepSpeedCPUAdam's thread pool; lockstep's optimizer uses the rank's threads"},
  };
  return entries;
}

const Entry* find(const std::string& section, const std::string& key) {
  for (const Entry& e : table())
    if (e.section == section && e.key == key) return &e;
  return nullptr;
}

}  // namespace

std::set<std::string> names(const std::string& section) {
  std::set<std::string> out;
  for (const Entry& e : table())
    if (e.section == section) out.insert(e.key);
  return out;
}

Verdict judge(const std::string& section, const std::string& key, const YAML::Node& value) {
  const std::string path = config_keys::join(section, key);
  const Entry* e = find(section, key);
  if (!e) return {false, "unknown key " + path};
  const std::string shown = value.IsMap() ? "the section" : config_keys::describe(value);
  if (e->accepts(value)) {
    if (e->feature.rfind("no effect", 0) == 0) return {true, path + ": " + e->feature};
    return {true, path + ": " + shown + " is DeepSpeed's default or off value: no effect (lockstep lacks " +
                      e->feature + ")"};
  }
  return {false, path + " is not supported yet (" + e->feature + "); remove it or set it to " + e->off};
}

}  // namespace lockstep::train::deepspeed_keys
