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

/// offload_optimizer.device and offload_param.device: none, cpu (this run's memory) or nvme.
enum class OffloadDevice { none, cpu, nvme };

struct ZeroConfig {
  /// zero_optimization.stage: 0 (DDP), 1, 2 or 3.
  int stage = 0;
  /// What the ZeRO optimizer implements, DeepSpeed's defaults filled in.
  parallel::ZeroOptions options{};
  /// Where offload_optimizer and offload_param put what they offload (nvme: options.offload_optimizer
  /// and options.offload_param_nvme_path say how).
  OffloadDevice offload_optimizer_device = OffloadDevice::none;
  OffloadDevice offload_param_device = OffloadDevice::none;
  /// Lines the trainer prints once at the start (keys accepted with no effect here, and why).
  std::vector<std::string> notes;
};

/// Parses the `zero_optimization` mapping. ValueError naming "zero_optimization.KEY" for an
/// unknown key (with the nearest known one), a wrong type or value, or a key or value that is not
/// supported yet.
ZeroConfig parseZeroConfig(const YAML::Node& node);

/// The NVMe offloads' directories (offload_optimizer.nvme_path, offload_param.nvme_path, where
/// their device is nvme) exist and are writable here: the launching process checks them before
/// any rank starts. IoError naming the key and the directory otherwise.
void checkOffloadDirs(const ZeroConfig& z);

}  // namespace lockstep::train
