#include "lockstep/train/config/zero_config.h"

#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>

#include "lockstep/train/config/config_keys.h"
#include "lockstep/util/error.h"
#include "lockstep/util/suggest.h"

namespace lockstep::train {

namespace {

const std::string kSection = "zero_optimization";

using config_keys::describe;

void checkKeys(const YAML::Node& n, const std::string& path, const std::vector<std::string>& known) {
  config_keys::checkKeys(n, path, known);
}

bool boolean(const YAML::Node& n, const std::string& path, const std::string& key, bool fallback) {
  if (!n[key]) return fallback;
  bool b;
  if (config_keys::isPlainScalar(n[key]) && YAML::convert<bool>::decode(n[key], b)) return b;
  throw ValueError(path + "." + key + ": expected a boolean, got " + config_keys::describeNonString(n[key]));
}

// DeepSpeed's counts are integers that JSON may write as 5e8: any integral number >= min.
int64_t count(const YAML::Node& n, const std::string& path, const std::string& key, int64_t fallback,
              int64_t min = 0) {
  if (!n[key]) return fallback;
  double d;
  if (config_keys::isPlainScalar(n[key]) && YAML::convert<double>::decode(n[key], d) && std::isfinite(d) &&
      d == std::floor(d) && d >= static_cast<double>(min) && d < 9.2e18)
    return static_cast<int64_t>(d);
  throw ValueError(path + "." + key + ": expected a whole number >= " + std::to_string(min) + ", got " +
                   config_keys::describeNonString(n[key]));
}

OffloadDevice device(const YAML::Node& n, const std::string& path) {
  if (!n["device"]) return OffloadDevice::none;
  const std::string d = n["device"].IsScalar() ? n["device"].Scalar() : "";
  if (d == "none") return OffloadDevice::none;
  if (d == "cpu") return OffloadDevice::cpu;
  if (d == "nvme") return OffloadDevice::nvme;
  throw ValueError(path + ".device: expected none, cpu or nvme, got " + describe(n["device"]));
}

void parseOffloadOptimizer(const YAML::Node& n, int stage, ZeroConfig& z) {
  const std::string path = kSection + ".offload_optimizer";
  checkKeys(n, path,
            {"device", "nvme_path", "buffer_count", "pin_memory", "pipeline_read", "pipeline_write",
             "fast_init", "ratio"});
  z.offload_optimizer_device = device(n, path);
  // DeepSpeed's defaults; buffer_count, pipeline_*, fast_init and nvme_path serve NVMe swapping only.
  const int64_t buffer_count = count(n, path, "buffer_count", 4, 1);
  const bool pin = boolean(n, path, "pin_memory", false);
  const bool pipeline_read = boolean(n, path, "pipeline_read", false);
  const bool pipeline_write = boolean(n, path, "pipeline_write", false);
  const bool fast_init = boolean(n, path, "fast_init", false);
  if (n["nvme_path"] && (!n["nvme_path"].IsScalar() || n["nvme_path"].Scalar().empty()))
    throw ValueError(path + ".nvme_path: expected a directory, got " + describe(n["nvme_path"]));
  double ratio = 1.0;
  if (n["ratio"]) {
    if (!config_keys::isPlainScalar(n["ratio"]) || !YAML::convert<double>::decode(n["ratio"], ratio) ||
        !(ratio >= 0 && ratio <= 1))
      throw ValueError(path + ".ratio: expected a number in [0, 1], got " + describe(n["ratio"]));
  }
  const std::string pin_note =
      pin ? " pin_memory has no effect on a CPU run (there is no device to copy to, so nothing to pin)." : "";
  if (z.offload_optimizer_device != OffloadDevice::none && stage == 0)
    throw ValueError(path + ": offloading needs ZeRO stage 1, 2 or 3; set " + kSection + ".stage");
  if (z.offload_optimizer_device == OffloadDevice::nvme) {
    if (!n["nvme_path"])
      throw ValueError(path + ".nvme_path: device nvme needs the directory to keep the optimizer states in");
    if (ratio != 1.0)
      throw ValueError(path +
                       ".ratio: only 1 (every optimizer state offloaded) is supported with device nvme");
    parallel::NvmeOffloadOptions& o = z.options.offload_optimizer;
    o.nvme_path = n["nvme_path"].Scalar();
    o.buffer_count = buffer_count;
    o.pipeline_read = pipeline_read;
    o.pipeline_write = pipeline_write;
    z.notes.push_back(path + ".device nvme: each rank's optimizer states live in a swap file under " +
                      o.nvme_path +
                      " (unlinked as soon as it is created, so it never outlives the run; df shows it, ls "
                      "does not), stepped in sub-groups of " +
                      kSection + ".sub_group_size elements." + pin_note +
                      (fast_init ? " fast_init has no effect: the states are created by the first step and "
                                   "nothing is written up front."
                                 : ""));
  }
  if (z.offload_optimizer_device == OffloadDevice::cpu) {
    z.options.offload_optimizer_pin_memory = pin;  // a GPU run's ZeRO-Offload (config.cpp) pins with it
    z.notes.push_back(
        path +
        ".device cpu: this run has no accelerator, so the optimizer states already live in CPU "
        "memory and the optimizer already steps on the CPU; nothing is moved" +
        std::string(pin ? " (pin_memory pins nothing: there is no device to copy to)" : "") +
        ". buffer_count, pipeline_read/write, fast_init and ratio have no effect without nvme.");
  }
}

void parseOffloadParam(const YAML::Node& n, int stage, ZeroConfig& z) {
  const std::string path = kSection + ".offload_param";
  checkKeys(n, path, {"device", "nvme_path", "buffer_count", "buffer_size", "max_in_cpu", "pin_memory"});
  z.offload_param_device = device(n, path);
  count(n, path, "buffer_count", 5);
  const int64_t buffer_size = count(n, path, "buffer_size", 100'000'000, 1);
  count(n, path, "max_in_cpu", 1'000'000'000);
  const bool pin = boolean(n, path, "pin_memory", false);
  z.options.offload_param_pin_memory = pin;  // a GPU run's offload_param cpu (config.cpp) pins with it
  if (n["nvme_path"] && !n["nvme_path"].IsScalar())
    throw ValueError(path + ".nvme_path: expected a path, got " + describe(n["nvme_path"]));
  // Stage 0 is plain data parallelism: DeepSpeed builds no ZeRO optimizer and never reads the
  // section (its own hybrid engine test sets offload_param at stage 0); the stage-0 note says so.
  if (stage == 0) {
    z.offload_param_device = OffloadDevice::none;
    return;
  }
  if (z.offload_param_device == OffloadDevice::nvme) {
    if (stage != 3)
      throw ValueError(path + ": offloading parameters needs ZeRO stage 3 (DeepSpeed's rule); set " +
                       kSection + ".stage: 3");
    if (!n["nvme_path"] || n["nvme_path"].Scalar().empty())
      throw ValueError(path + ".nvme_path: device nvme needs the directory to keep the parameters in");
    if (z.offload_optimizer_device != OffloadDevice::nvme)
      throw ValueError(path +
                       ".device nvme needs offload_optimizer.device nvme too: the swapped parameter pieces "
                       "are stepped sub-group by sub-group with their optimizer states (ZeRO-Infinity's "
                       "configuration); set " +
                       kSection + ".offload_optimizer: {device: nvme, nvme_path: ...}");
    z.options.offload_param_nvme_path = n["nvme_path"].Scalar();
    z.options.offload_param_buffer_size = buffer_size;
    z.notes.push_back(
        path + ".device nvme: each rank's pieces of the parameters live in a swap file under " +
        z.options.offload_param_nvme_path +
        " (unlinked at once), read into memory only for their all-gather and their optimizer step; the "
        "gradient pieces are swapped under offload_optimizer.nvme_path. buffer_size (" +
        std::to_string(buffer_size) +
        " elements) bounds a rank's piece of one bucket, as in DeepSpeed. buffer_count and max_in_cpu have "
        "no "
        "effect: a piece is in memory only while it is used, not kept in a pool." +
        (pin ? " pin_memory pins nothing on a CPU run." : ""));
  }
  if (z.offload_param_device == OffloadDevice::cpu) {
    if (stage != 3)
      throw ValueError(path + ": offloading parameters needs ZeRO stage 3 (DeepSpeed's rule); set " +
                       kSection + ".stage: 3");
    z.notes.push_back(path +
                      ".device cpu: this run has no accelerator, so the parameter partitions already live in "
                      "CPU memory; nothing is moved. buffer_count, buffer_size and max_in_cpu have no effect "
                      "without nvme.");
  }
}

// DeepSpeed's other spellings (zero/config.py's pydantic aliases and deprecated fields), read as
// the key they stand for: (alias, key).
const std::pair<const char*, const char*> kAliases[] = {
    {"prefetch_bucket_size", "stage3_prefetch_bucket_size"},
    {"param_persistence_threshold", "stage3_param_persistence_threshold"},
    {"max_live_parameters", "stage3_max_live_parameters"},
    {"max_reuse_distance", "stage3_max_reuse_distance"},
    {"gather_16bit_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save"},
    {"module_granularity_threshold", "stage3_module_granularity_threshold"},
    {"stage3_use_all_reduce_for_fetch_params", "use_all_reduce_for_fetch_params"},
    {"model_persistence_threshold", "stage3_model_persistence_threshold"},
    {"allgather_sequential", "stage3_allgather_sequential"},
};

// DeepSpeed's deprecated booleans for an offload section (zero/config.py's new_param_fn): true
// means {device: cpu}; false, nothing.
const std::pair<const char*, const char*> kDeprecatedOffloads[] = {
    {"cpu_offload", "offload_optimizer"},
    {"cpu_offload_param", "offload_param"},
};

// The section with every alias renamed to its key; an alias given with its key is an error, as
// DeepSpeed cannot take both either. cpu_offload and cpu_offload_param (deprecated) true mean
// offload_optimizer and offload_param {device: cpu}; false, nothing.
YAML::Node canonical(const YAML::Node& given) {
  if (!given.IsMap()) return given;
  YAML::Node n = YAML::Clone(given);
  for (const auto& [alias, key] : kAliases) {
    if (!n[alias]) continue;
    if (n[key])
      throw ValueError(kSection + "." + alias + " and " + kSection + "." + key +
                       " are the same key in DeepSpeed; give one of them");
    n[key] = n[alias];
    n.remove(alias);
  }
  for (const auto& [deprecated, section] : kDeprecatedOffloads) {
    if (!n[deprecated]) continue;
    if (boolean(n, kSection, deprecated, false)) {
      if (n[section])
        throw ValueError(kSection + "." + deprecated + ": true is DeepSpeed's deprecated spelling of " +
                         section + ": {device: cpu}; give one of them");
      YAML::Node o(YAML::NodeType::Map);
      o["device"] = "cpu";
      n[section] = o;
    }
    n.remove(deprecated);
  }
  return n;
}

ZeroConfig parseZeroFields(const YAML::Node& n);

}  // namespace

ZeroConfig parseZeroConfig(const YAML::Node& n) { return parseZeroFields(canonical(n)); }

namespace {

ZeroConfig parseZeroFields(const YAML::Node& n) {
  checkKeys(n, kSection,
            {"stage", "contiguous_gradients", "overlap_comm", "reduce_scatter", "reduce_bucket_size",
             "allgather_partitions", "allgather_bucket_size", "round_robin_gradients", "offload_param",
             "offload_optimizer", "sub_group_size", "stage3_prefetch_bucket_size",
             "stage3_param_persistence_threshold", "stage3_max_live_parameters", "stage3_max_reuse_distance",
             "stage3_gather_16bit_weights_on_model_save", "stage3_gather_fp16_weights_on_model_save"});
  ZeroConfig z;
  z.stage = static_cast<int>(count(n, kSection, "stage", 0));
  if (z.stage > 3)
    throw ValueError(kSection + ".stage: expected 0, 1, 2 or 3, got " + std::to_string(z.stage));
  parallel::ZeroOptions& o = z.options;
  o.stage = std::max(z.stage, 1);
  o.reduce_bucket_size = count(n, kSection, "reduce_bucket_size", 500'000'000, 1);
  o.allgather_bucket_size = count(n, kSection, "allgather_bucket_size", 500'000'000, 1);
  o.reduce_scatter = boolean(n, kSection, "reduce_scatter", true);
  o.allgather_partitions = boolean(n, kSection, "allgather_partitions", true);
  // DeepSpeed: overlap_comm defaults to true at stage 3 and false below it.
  o.overlap_comm = boolean(n, kSection, "overlap_comm", z.stage == 3);
  const bool contiguous = boolean(n, kSection, "contiguous_gradients", true);
  if (!contiguous && z.stage == 2) {
    config_keys::refuse(kSection +
                        ".contiguous_gradients: false is not supported yet; lockstep's stage 2 always copies "
                        "gradients into contiguous buckets as they are produced (DeepSpeed's default, true)");
  }
  if (boolean(n, kSection, "round_robin_gradients", false)) {
    config_keys::refuse(
        kSection +
        ".round_robin_gradients: true is not supported yet (it spreads the copies of gradients "
        "to CPU offload memory among ranks); use false");
  }
  if (n["offload_optimizer"]) parseOffloadOptimizer(n["offload_optimizer"], z.stage, z);
  if (n["offload_param"]) parseOffloadParam(n["offload_param"], z.stage, z);
  // Stage 3's gathering knobs (zero/parameter_coordinator.h), DeepSpeed's defaults.
  o.prefetch_bucket_size = count(n, kSection, "stage3_prefetch_bucket_size", o.prefetch_bucket_size, 0);
  o.param_persistence_threshold =
      count(n, kSection, "stage3_param_persistence_threshold", o.param_persistence_threshold, 0);
  o.max_live_parameters = count(n, kSection, "stage3_max_live_parameters", o.max_live_parameters, 0);
  o.max_reuse_distance = count(n, kSection, "stage3_max_reuse_distance", o.max_reuse_distance, 0);
  std::vector<std::string> stage3_only;
  if (!o.offload_optimizer.nvme_path.empty()) {  // sub-groups are what the NVMe offload streams
    o.offload_optimizer.sub_group_size = count(n, kSection, "sub_group_size", 1'000'000'000, 1);
  } else if (n["sub_group_size"]) {
    count(n, kSection, "sub_group_size", 0);
    stage3_only.push_back("sub_group_size");
  }
  for (const char* key : {"stage3_prefetch_bucket_size", "stage3_param_persistence_threshold",
                          "stage3_max_live_parameters", "stage3_max_reuse_distance"}) {
    if (n[key]) stage3_only.push_back(key);  // read above
  }
  for (const char* key :
       {"stage3_gather_16bit_weights_on_model_save", "stage3_gather_fp16_weights_on_model_save"}) {
    if (!n[key]) continue;
    boolean(n, kSection, key, false);
    stage3_only.push_back(key);
  }
  if (!stage3_only.empty()) {
    std::string keys;
    for (const auto& k : stage3_only) keys += (keys.empty() ? "" : ", ") + kSection + "." + k;
    if (z.stage == 3) {
      // sub_group_size without NVMe offload (the optimizer steps its whole partition as one group:
      // the same result) and the gather-on-save flags (saves always hold gathered f32 weights)
      // are noted.
      std::string noted;
      for (const char* key : {"sub_group_size", "stage3_gather_16bit_weights_on_model_save",
                              "stage3_gather_fp16_weights_on_model_save"}) {
        if (std::find(stage3_only.begin(), stage3_only.end(), key) != stage3_only.end())
          noted += (noted.empty() ? "" : ", ") + kSection + "." + key;
      }
      if (!noted.empty()) {
        z.notes.push_back(
            noted +
            ": no effect in lockstep's stage 3, which steps its whole partition at once and saves "
            "checkpoints with gathered f32 weights");
      }
    } else {
      z.notes.push_back(keys + ": used by ZeRO stage 3 only (as in DeepSpeed); no effect at stage " +
                        std::to_string(z.stage));
    }
  }
  if (z.stage == 1 && n["overlap_comm"])
    z.notes.push_back(kSection +
                      ".overlap_comm: stage 1 averages gradients through DDP's buckets, whose allreduce "
                      "always overlaps backward");
  if (z.stage == 0 && n.size() > 1)
    z.notes.push_back(kSection +
                      ".stage is 0 (plain data parallelism): the section's other keys have no effect");
  return z;
}

}  // namespace

void checkOffloadDirs(const ZeroConfig& z) {
  auto check = [](const std::string& key, const std::string& dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::file_status st = fs::status(dir, ec);
    std::string why;
    if (st.type() == fs::file_type::not_found) {
      why = "does not exist";
    } else if (ec) {
      why = "cannot be read (" + ec.message() + ")";
    } else if (st.type() != fs::file_type::directory) {
      why = "is not a directory";
    } else if (::access(dir.c_str(), W_OK | X_OK) != 0) {
      why = "is not writable (" + std::string(std::strerror(errno)) + ")";
    }
    if (!why.empty())
      throw IoError(kSection + "." + key + ": '" + dir + "' " + why + "; create it or point " + key +
                    " at a writable directory on a local drive (each rank keeps its swap files there)");
  };
  if (z.offload_optimizer_device == OffloadDevice::nvme)
    check("offload_optimizer.nvme_path", z.options.offload_optimizer.nvme_path);
  if (z.offload_param_device == OffloadDevice::nvme)
    check("offload_param.nvme_path", z.options.offload_param_nvme_path);
}

}  // namespace lockstep::train
