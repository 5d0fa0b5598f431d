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
  return v.IsScalar() && YAML::convert<bool>::decode(v, b) && b == want;
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
    return v.IsScalar() && YAML::convert<double>::decode(v, d) && d == want;
  };
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
      {"", "torch_autocast", offSection(), "{enabled: false}",
       "torch.autocast of chosen modules; use bf16 or fp16 for autocast training"},
      {"", "hybrid_engine", offSection(), "{enabled: false}", "the hybrid engine (RLHF generation)"},
      {"", "sparse_attention", emptySection(), "absent", "sparse attention"},
      {"", "pipeline", emptySection(), "absent", "pipeline parallelism"},
      {"", "compression_training", emptySection(), "absent", "compression training"},
      {"", "aio", anything(), "",
       "no effect: aio tunes DeepSpeed's libaio NVMe I/O; lockstep's NVMe swap files use "
       "their own reads and writes"},
      {"", "zero_allow_untested_optimizer", anyBoolean(), "true or false",
       "no effect: lockstep's ZeRO steps every optimizer of its registry"},
      {"", "zero_force_ds_cpu_optimizer", anyBoolean(), "true or false",
       "no effect: lockstep's optimizers are its own on every device"},
      {"", "communication_data_type", null(), "null",
       "communicating gradients in another dtype (ddp.comm_hook bf16_compress or fp16_compress compresses "
       "DDP's buckets)"},
      {"", "prescale_gradients", boolean(false), "false",
       "dividing gradients by the world size before the allreduce"},
      {"", "gradient_predivide_factor", number(1.0), "1.0", "a gradient pre-division factor"},
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
      {"", "cuda_visible_devices", null(), "null",
       "choosing GPUs from the config; set CUDA_VISIBLE_DEVICES in the environment"},
      {"", "data_types",
       [](const YAML::Node& v) {
         if (v.IsNull()) return true;
         if (!v.IsMap()) return false;
         for (const auto& kv : v) {
           const std::string k = kv.first.as<std::string>();
           if (k != "grad_accum_dtype" || !kv.second.IsNull()) return false;
         }
         return true;
       },
       "{grad_accum_dtype: null}", "a gradient accumulation dtype (gradients accumulate in their own dtype)"},
      // bf16 (runtime/precision_config.py).
      {"bf16", "bf16_master_weights_and_grads", boolean(false), "false",
       "bf16 master weights and gradients (lockstep keeps f32 master weights and gradients)"},
      {"bf16", "bf16_optimizer_states", boolean(false), "false",
       "bf16 optimizer states (lockstep keeps f32 optimizer states)"},
      // zero_optimization (runtime/zero/config.py).
      {"zero_optimization", "load_from_fp32_weights", boolean(true), "true",
       "rebuilding f32 weights from 16-bit ones at load (lockstep's checkpoints hold f32 weights)"},
      {"zero_optimization", "elastic_checkpoint", boolean(false), "false", "elastic checkpoints"},
      {"zero_optimization", "ignore_unused_parameters", boolean(true), "true",
       "refusing parameters that get no gradient"},
      {"zero_optimization", "legacy_stage1", boolean(false), "false", "DeepSpeed's legacy stage 1"},
      {"zero_optimization", "cpu_offload_params", boolean(false), "false",
       "cpu_offload_params (deprecated; use offload_param: {device: cpu})"},
      {"zero_optimization", "cpu_offload_use_pin_memory", boolean(false), "false",
       "cpu_offload_use_pin_memory (deprecated; use offload_optimizer.pin_memory)"},
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

namespace {

void takeAuto(YAML::Node n, const std::string& path, int depth, const std::set<std::string>& own,
              std::vector<std::string>& out) {
  if (!n.IsMap() || depth > 64) return;  // checkNoDuplicateKeys bounds the document first
  std::vector<std::string> autos;
  for (const auto& kv : n) {
    const std::string key = kv.first.as<std::string>();
    if (own.count(config_keys::join(path, key))) continue;
    if (kv.second.IsScalar() && kv.second.Scalar() == "auto") {
      autos.push_back(key);
      out.push_back(config_keys::join(path, key));
    } else {
      takeAuto(kv.second, config_keys::join(path, key), depth + 1, own, out);
    }
  }
  for (const auto& key : autos) n.remove(key);
}

}  // namespace

std::vector<std::string> takeAutoValues(YAML::Node root, const std::set<std::string>& own) {
  std::vector<std::string> out;
  takeAuto(root, "", 0, own, out);
  return out;
}

}  // namespace lockstep::train::deepspeed_keys
