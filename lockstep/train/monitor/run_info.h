#pragma once
// DIR/run.json, written by rank 0 when training starts: what ran (the config document with its
// overrides and the values resolved from it) and where (world size, backend, CPU model, the ISA
// the kernels use, versions). `lockstep report` shows it; summary.json holds the results.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lockstep/train/config/config.h"

namespace lockstep::train {

struct RunFacts {
  /// What the CLI ran: {"config": path, "overrides": [...]} (TrainerOptions::config_json).
  nlohmann::json invocation = nlohmann::json::object();
  int world_size = 1;
  std::string backend;         // the process group's, "none" on one rank
  std::string device = "cpu";  // where this rank trains: "cpu", "cuda:0 (NVIDIA H100 ..., sm_90, ...)"
  int64_t steps_per_epoch = 0;
  int64_t total_steps = 0;
  std::string checkpoint_dir;
  /// The dataset's class names (run.json's class_to_idx, as torchvision's ImageFolder has it);
  /// empty when its classes are bare numbers.
  std::vector<std::string> classes;
};

/// run.json's document. The config file is read again (a file gone since is noted, not fatal).
nlohmann::json describeRun(const TrainConfig& config, const RunFacts& facts);

/// This process's peak resident memory so far (getrusage's ru_maxrss), in bytes.
int64_t peakRssBytes();

/// The "environment" part alone: host, CPU model and cores, kernels, ISA, thread count, versions.
nlohmann::json describeEnvironment(int world_size, const std::string& backend);

}  // namespace lockstep::train
