#include "lockstep/train/monitor/run_summary.h"

#include <algorithm>
#include <cmath>

#include "lockstep/parallel/tensor_comm.h"
#include "lockstep/util/json.h"

namespace lockstep::parallel {
// summary.json's ddp_timings entries, and what ranks send rank 0: the fields by their own names.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(ReducerTimings, iterations, forward_compute_ms, backward_compute_ms,
                                   backward_comm_ms, backward_compute_comm_overlap_ms, backward_comm_wait_ms)
}  // namespace lockstep::parallel

namespace lockstep::train {

nlohmann::json toJson(const TrainSummary& s) {
  nlohmann::json j = {
      {"world_size", s.world_size},
      {"epochs", s.epochs},
      {"steps", s.steps},
      {"global_batch_size", s.global_batch_size},
      {"samples_per_second", s.samples_per_second},
      {"train_seconds", s.train_seconds},
      {"eval_seconds", s.eval_seconds},
      {"checkpoint_seconds", s.checkpoint_seconds},
      {"wall_seconds", s.wall_seconds},
      {"data_wait_seconds", s.data_wait_seconds},
      {"data_wait_fraction", s.train_seconds > 0 ? s.data_wait_seconds / s.train_seconds : 0.0},
      {"test_accuracy", s.test_accuracy},
      {"test_loss", s.test_loss}};
  j["precision"] = s.precision;
  if (!s.precision_path.empty()) j["precision_path"] = s.precision_path;
  if (s.has_loss_scale) {
    j["loss_scale"] = s.loss_scale;
    j["skipped_steps"] = s.skipped_steps;
  }
  if (!s.ddp_timings.empty()) j["ddp_timings"] = s.ddp_timings;
  if (s.tokens_per_sample > 0) {
    const double tokens_per_second = s.samples_per_second * static_cast<double>(s.tokens_per_sample);
    j["tokens_per_second"] = tokens_per_second;
    if (s.flops_per_token) {
      j["flops_per_token"] = *s.flops_per_token;
      j["model_flops_per_second"] = tokens_per_second * *s.flops_per_token;
      if (s.peak_flops) {
        j["mfu"] = tokens_per_second * *s.flops_per_token / (*s.peak_flops * std::max(1, s.world_size));
        j["mfu_peak_flops"] = *s.peak_flops;
        j["mfu_gpu"] = s.peak_gpu;
      }
    }
  }
  if (s.val_loss) {
    j["val_loss"] = *s.val_loss;
    j["val_perplexity"] = std::exp(*s.val_loss);
  }
  if (!s.samples.is_null()) j["samples"] = s.samples;
  if (!s.checkpoint_profile.is_null()) j["activation_checkpointing_profile"] = s.checkpoint_profile;
  if (!s.pipeline.is_null()) j["pipeline"] = s.pipeline;
  j["memory"] = nlohmann::json::array();
  for (size_t r = 0; r < s.memory.size(); ++r) {
    nlohmann::json m = {{"rank", r},
                        {"parameters", s.memory[r].parameters},
                        {"gradients", s.memory[r].gradients},
                        {"optimizer_states", s.memory[r].optimizer_states},
                        {"host_offload", s.memory[r].host_offload}};
    if (r < s.measured_memory.size()) {
      const TrainSummary::RankMemory& mm = s.measured_memory[r];
      m["peak_rss_bytes"] = mm.peak_rss_bytes;
      if (mm.gpu_allocated_peak_bytes >= 0) {
        m["gpu_allocated_peak_bytes"] = mm.gpu_allocated_peak_bytes;
        m["gpu_reserved_peak_bytes"] = mm.gpu_reserved_peak_bytes;
        m["gpu_allocated_between_steps_bytes"] = mm.gpu_allocated_between_steps_bytes;
      }
    }
    j["memory"].push_back(std::move(m));
  }
  return j;
}

std::vector<parallel::ReducerTimings> gatherReducerTimings(comm::ProcessGroup& group,
                                                           const parallel::ReducerTimings& mine) {
  std::vector<parallel::ReducerTimings> all;
  for (const std::string& r : parallel::allgatherBytes(group, nlohmann::json(mine).dump()))
    all.push_back(json::parse(r).get<parallel::ReducerTimings>());
  return all;
}

}  // namespace lockstep::train
