#pragma once
// The config's `zero_optimization` section: DeepSpeed's keys with DeepSpeed's meanings and defaults
// (deepspeed/runtime/zero/config.py and offload_config.py). Each key is implemented, has no effect
// at the chosen stage in DeepSpeed either (said once in the log, through `notes`), or is a
// ValueError naming it and saying it is not supported yet. Pure.
#include <string>
#include <vector>

#include "lockstep/parallel/zero/optimizer.h"

namespace YAML {
class Node;
}

namespace lockstep::train {

struct ZeroConfig {
  /// zero_optimization.stage: 0 (DDP), 1, 2 or 3.
  int stage = 0;
  /// What the ZeRO optimizer implements, DeepSpeed's defaults filled in.
  parallel::ZeroOptions options{};
  /// offload_optimizer.device: "none", "cpu" (this run's memory) or "nvme" (options.offload_optimizer);
  /// offload_param.device: "none", "cpu" or "nvme" (options.offload_param_nvme_path).
  std::string offload_optimizer_device = "none";
  std::string offload_param_device = "none";
  /// Lines the trainer prints once at the start (keys accepted with no effect here, and why).
  std::vector<std::string> notes;
};

/// Parses the `zero_optimization` mapping. ValueError naming "zero_optimization.KEY" for an
/// unknown key (with the nearest known one), a wrong type or value, or a key or value that is not
/// supported yet.
ZeroConfig parseZeroConfig(const YAML::Node& node);

}  // namespace lockstep::train
