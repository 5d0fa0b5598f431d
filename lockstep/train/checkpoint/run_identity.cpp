#include "lockstep/train/checkpoint/run_identity.h"

#include <cstdio>
#include <random>

#include "lockstep/util/error.h"

namespace lockstep::train {

nlohmann::json toJson(const RunIdentity& id) {
  return {{"run_id", id.run_id},
          {"config_hash", id.config_hash},
          {"seed", id.seed},
          {"world_size", id.world_size},
          {"train_batch_size", id.train_batch_size},
          {"micro_batch_size", id.micro_batch_size},
          {"gradient_accumulation_steps", id.gradient_accumulation_steps}};
}

RunIdentity runIdentityFromJson(const nlohmann::json& j, const std::string& where) {
  try {
    RunIdentity id;
    id.run_id = j.at("run_id").get<std::string>();
    id.config_hash = j.at("config_hash").get<std::string>();
    id.seed = j.at("seed").get<uint64_t>();
    id.world_size = j.at("world_size").get<int64_t>();
    id.train_batch_size = j.at("train_batch_size").get<int64_t>();
    id.micro_batch_size = j.at("micro_batch_size").get<int64_t>();
    id.gradient_accumulation_steps = j.at("gradient_accumulation_steps").get<int64_t>();
    return id;
  } catch (const nlohmann::json::exception& e) {
    throw IoError(where + ": the run identity is malformed (" + e.what() + ")");
  }
}

std::string newRunId() {
  std::random_device rd;
  const uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string incompatibility(const RunIdentity& ckpt, const RunIdentity& now) {
  if (ckpt.config_hash != now.config_hash) {
    return "it was trained with another config (config hash " + ckpt.config_hash + ", this run's is " +
           now.config_hash + ")";
  }
  if (ckpt.seed != now.seed) {
    return "it was trained with seed " + std::to_string(ckpt.seed) + ", this run uses seed " +
           std::to_string(now.seed);
  }
  return "";
}

std::string describe(const RunIdentity& id) {
  return "run " + id.run_id + ", config hash " + id.config_hash + ", seed " + std::to_string(id.seed) +
         ", world size " + std::to_string(id.world_size) + ", global batch " +
         std::to_string(id.train_batch_size);
}

}  // namespace lockstep::train
