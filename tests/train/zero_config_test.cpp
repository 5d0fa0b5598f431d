// The config's zero_optimization section: DeepSpeed's keys, defaults and meanings; every bad or
// not-yet-supported key or value is an error naming it.
#include "lockstep/train/config/zero_config.h"

#include <gtest/gtest.h>

#include "lockstep/train/config/config.h"
#include "lockstep/util/error.h"
#include "train/config_test_util.h"

using namespace lockstep;
using namespace lockstep::train;
using lockstep::test::has;

namespace {

std::string errorOf(const std::string& zero) {
  try {
    parseTrainConfig("train_batch_size: 8\nzero_optimization: " + zero, {}, 1);
  } catch (const ValueError& e) {
    return e.what();
  }
  return "(no error)";
}

ZeroConfig parse(const std::string& zero) {
  return parseTrainConfig("train_batch_size: 8\nzero_optimization: " + zero, {}, 1).zero;
}

}  // namespace

TEST(ZeroConfig, defaults_are_deepspeeds) {
  ZeroConfig z = parseTrainConfig("train_batch_size: 8", {}, 1).zero;
  EXPECT_EQ(z.stage, 0);
  z = parse("{stage: 2}");
  EXPECT_EQ(z.stage, 2);
  EXPECT_EQ(z.options.reduce_bucket_size, 500000000);
  EXPECT_EQ(z.options.allgather_bucket_size, 500000000);
  EXPECT_TRUE(z.options.reduce_scatter);
  EXPECT_TRUE(z.options.allgather_partitions);
  EXPECT_FALSE(z.options.overlap_comm);  // DeepSpeed: true at stage 3 only
  EXPECT_TRUE(z.notes.empty());
}

TEST(ZeroConfig, every_listed_key_is_read) {
  // A DeepSpeed stage-2 block as JSON writes it, numbers in e-notation included.
  ZeroConfig z = parse(R"({"stage": 2, "contiguous_gradients": true, "overlap_comm": true,
      "reduce_scatter": false, "reduce_bucket_size": 5e7, "allgather_partitions": false,
      "allgather_bucket_size": 2e8, "round_robin_gradients": false,
      "offload_optimizer": {"device": "cpu", "pin_memory": true, "buffer_count": 4, "fast_init": false,
                            "nvme_path": "/local_nvme"},
      "offload_param": {"device": "none", "nvme_path": "/local_nvme", "pin_memory": true,
                        "buffer_count": 5, "buffer_size": 1e8},
      "sub_group_size": 1e9, "stage3_prefetch_bucket_size": 5e7, "stage3_param_persistence_threshold": 1e5,
      "stage3_max_live_parameters": 1e9, "stage3_max_reuse_distance": 1e9,
      "stage3_gather_16bit_weights_on_model_save": true})");
  EXPECT_EQ(z.stage, 2);
  EXPECT_EQ(z.options.reduce_bucket_size, 50000000);
  EXPECT_EQ(z.options.allgather_bucket_size, 200000000);
  EXPECT_FALSE(z.options.reduce_scatter);
  EXPECT_FALSE(z.options.allgather_partitions);
  EXPECT_TRUE(z.options.overlap_comm);
  EXPECT_EQ(z.offload_optimizer_device, OffloadDevice::cpu);
  EXPECT_EQ(z.offload_param_device, OffloadDevice::none);
  // Said once in the log: the CPU offload moves nothing, the stage-3 keys have no effect at stage 2.
  ASSERT_EQ(z.notes.size(), 2u);
  EXPECT_TRUE(has(z.notes[0], "already live in CPU memory")) << z.notes[0];
  EXPECT_TRUE(has(z.notes[1], "stage3_max_live_parameters") && has(z.notes[1], "stage 3 only")) << z.notes[1];
}

TEST(ZeroConfig, stage_3_is_accepted_and_its_knobs_are_read_or_logged) {
  const ZeroConfig z = parse(
      "{stage: 3, offload_param: {device: cpu}, sub_group_size: 1000000000, "
      "stage3_gather_16bit_weights_on_model_save: true}");
  EXPECT_EQ(z.stage, 3);
  EXPECT_EQ(z.options.stage, 3);
  EXPECT_EQ(z.offload_param_device, OffloadDevice::cpu);
  ASSERT_EQ(z.notes.size(), 2u);
  EXPECT_TRUE(has(z.notes[0], "parameter partitions already live in CPU memory")) << z.notes[0];
  EXPECT_TRUE(has(z.notes[1], "sub_group_size") && has(z.notes[1], "no effect in lockstep's stage 3"))
      << z.notes[1];
  // DeepSpeed's defaults, then the per-layer gathering knobs as written.
  EXPECT_EQ(z.options.prefetch_bucket_size, 50000000);
  EXPECT_EQ(z.options.param_persistence_threshold, 100000);
  EXPECT_EQ(z.options.max_live_parameters, 1000000000);
  EXPECT_EQ(z.options.max_reuse_distance, 1000000000);
  const ZeroConfig k = parse(
      "{stage: 3, stage3_prefetch_bucket_size: 0, stage3_param_persistence_threshold: 1e4, "
      "stage3_max_live_parameters: 3e8, stage3_max_reuse_distance: 0}");
  EXPECT_EQ(k.options.prefetch_bucket_size, 0);
  EXPECT_EQ(k.options.param_persistence_threshold, 10000);
  EXPECT_EQ(k.options.max_live_parameters, 300000000);
  EXPECT_EQ(k.options.max_reuse_distance, 0);
  EXPECT_TRUE(k.notes.empty());
  EXPECT_TRUE(has(errorOf("{stage: 3, stage3_max_live_parameters: -1}"),
                  "zero_optimization.stage3_max_live_parameters: expected a whole number >= 0"));
}

TEST(ZeroConfig, nvme_offload_of_the_optimizer_takes_deepspeeds_keys) {
  ZeroConfig z = parse(R"({"stage": 3, "sub_group_size": 1e8,
      "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme", "buffer_count": 6,
                            "pipeline_read": true, "pipeline_write": true, "pin_memory": true,
                            "fast_init": true}})");
  const parallel::NvmeOffloadOptions& o = z.options.offload_optimizer;
  EXPECT_EQ(z.offload_optimizer_device, OffloadDevice::nvme);
  EXPECT_EQ(o.nvme_path, "/local_nvme");
  EXPECT_EQ(o.sub_group_size, 100000000);
  EXPECT_EQ(o.buffer_count, 6);
  EXPECT_TRUE(o.pipeline_read);
  EXPECT_TRUE(o.pipeline_write);
  // sub_group_size has its meaning now (no "no effect" note); pin_memory and fast_init are said to
  // have none.
  ASSERT_EQ(z.notes.size(), 1u);
  EXPECT_TRUE(has(z.notes[0], "live in a swap file under /local_nvme")) << z.notes[0];
  EXPECT_TRUE(has(z.notes[0], "pin_memory has no effect on a CPU run")) << z.notes[0];
  EXPECT_TRUE(has(z.notes[0], "fast_init has no effect")) << z.notes[0];
  // DeepSpeed's defaults, at stage 1 too.
  z = parse("{stage: 1, offload_optimizer: {device: nvme, nvme_path: /x}}");
  EXPECT_EQ(z.options.offload_optimizer.sub_group_size, 1000000000);
  EXPECT_EQ(z.options.offload_optimizer.buffer_count, 4);
  EXPECT_FALSE(z.options.offload_optimizer.pipeline_read);
  EXPECT_FALSE(z.options.offload_optimizer.pipeline_write);
  // Without nvme the swap options stay off.
  EXPECT_TRUE(parse("{stage: 2, offload_optimizer: {device: cpu, nvme_path: /x}}")
                  .options.offload_optimizer.nvme_path.empty());
}

TEST(ZeroConfig, nvme_offload_of_the_parameters_takes_deepspeeds_keys) {
  // ZeRO-Infinity's configuration: parameters and optimizer states on NVMe.
  const ZeroConfig z = parse(R"({"stage": 3,
      "offload_param": {"device": "nvme", "nvme_path": "/local_nvme", "buffer_count": 5, "buffer_size": 1e8,
                        "max_in_cpu": 1e9, "pin_memory": true},
      "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme2"}})");
  EXPECT_EQ(z.offload_param_device, OffloadDevice::nvme);
  EXPECT_EQ(z.options.offload_param_nvme_path, "/local_nvme");
  EXPECT_EQ(z.options.offload_param_buffer_size, 100000000);
  EXPECT_EQ(z.options.offload_optimizer.nvme_path, "/local_nvme2");
  ASSERT_EQ(z.notes.size(), 2u);
  EXPECT_TRUE(has(z.notes[1], "pieces of the parameters live in a swap file under /local_nvme"))
      << z.notes[1];
  EXPECT_TRUE(has(z.notes[1], "buffer_count and max_in_cpu have no effect")) << z.notes[1];
  // Not asked for: nothing swapped.
  EXPECT_TRUE(parse("{stage: 3, offload_param: {device: none, nvme_path: /x}}")
                  .options.offload_param_nvme_path.empty());
}

TEST(ZeroConfig, seed_002s_stage_3_block_runs_as_written) {
  const ZeroConfig z = parse(R"({"stage": 3, "offload_param": {"device": "cpu", "pin_memory": true},
      "offload_optimizer": {"device": "cpu", "pin_memory": true}, "contiguous_gradients": true,
      "overlap_comm": true})");
  EXPECT_EQ(z.options.stage, 3);
  EXPECT_TRUE(z.options.overlap_comm);
  EXPECT_EQ(z.offload_param_device, OffloadDevice::cpu);
  EXPECT_EQ(z.offload_optimizer_device, OffloadDevice::cpu);
}

TEST(ZeroConfig, unsupported_values_are_errors_naming_the_key) {
  EXPECT_TRUE(has(errorOf("{stage: 4}"), "zero_optimization.stage: expected 0, 1, 2 or 3"));
  EXPECT_TRUE(has(errorOf("{stage: 2, offload_optimizer: {device: nvme}}"),
                  "offload_optimizer.nvme_path: device nvme needs the directory"));
  EXPECT_TRUE(has(errorOf("{stage: 0, offload_optimizer: {device: nvme, nvme_path: /tmp}}"),
                  "offload_optimizer: offloading needs ZeRO stage 1, 2 or 3"));
  EXPECT_TRUE(has(errorOf("{stage: 2, offload_optimizer: {device: nvme, nvme_path: /tmp, ratio: 0.5}}"),
                  "offload_optimizer.ratio: only 1"));
  EXPECT_TRUE(has(errorOf("{stage: 2, offload_optimizer: {device: nvme, nvme_path: /tmp, buffer_count: 0}}"),
                  "offload_optimizer.buffer_count: expected a whole number >= 1"));
  EXPECT_TRUE(
      has(errorOf("{stage: 2, offload_optimizer: {device: nvme, nvme_path: /tmp}, sub_group_size: 0}"),
          "zero_optimization.sub_group_size: expected a whole number >= 1"));
  EXPECT_TRUE(has(errorOf("{stage: 2, offload_param: {device: cpu}}"),
                  "offload_param: offloading parameters needs ZeRO stage 3"));
  EXPECT_TRUE(has(errorOf("{stage: 3, offload_param: {device: nvme, nvme_path: /tmp}}"),
                  "offload_param.device nvme needs offload_optimizer.device nvme too"));
  EXPECT_TRUE(has(errorOf("{stage: 2, offload_param: {device: nvme, nvme_path: /tmp}, offload_optimizer: "
                          "{device: nvme, nvme_path: /tmp}}"),
                  "offload_param: offloading parameters needs ZeRO stage 3"));
  EXPECT_TRUE(has(errorOf("{stage: 3, offload_param: {device: nvme}, offload_optimizer: {device: nvme, "
                          "nvme_path: /tmp}}"),
                  "offload_param.nvme_path: device nvme needs the directory"));
  EXPECT_TRUE(has(errorOf("{stage: 3, offload_param: {device: nvme, nvme_path: /tmp, buffer_size: 0}, "
                          "offload_optimizer: {device: nvme, nvme_path: /tmp}}"),
                  "offload_param.buffer_size: expected a whole number >= 1"));
  EXPECT_TRUE(has(errorOf("{stage: 0, offload_optimizer: {device: cpu}}"), "needs ZeRO stage 1, 2 or 3"));
  EXPECT_TRUE(has(errorOf("{stage: 2, contiguous_gradients: false}"),
                  "contiguous_gradients: false is not supported"));
  EXPECT_TRUE(has(errorOf("{stage: 2, round_robin_gradients: true}"),
                  "round_robin_gradients: true is not supported"));
  EXPECT_TRUE(has(errorOf("{stage: 2, elastic_checkpoint: true}"),
                  "zero_optimization.elastic_checkpoint is not supported yet"));
}

TEST(ZeroConfig, bad_keys_and_values_are_errors_naming_the_key) {
  EXPECT_EQ(errorOf("{stage: 2, reduce_bucket_sise: 10}"),
            "unknown key zero_optimization.reduce_bucket_sise (did you mean "
            "zero_optimization.reduce_bucket_size?)");
  EXPECT_TRUE(
      has(errorOf("{stage: two}"), "zero_optimization.stage: expected a whole number >= 0, got 'two'"));
  EXPECT_TRUE(has(errorOf("{stage: 2, reduce_bucket_size: 0}"), "zero_optimization.reduce_bucket_size"));
  EXPECT_TRUE(has(errorOf("{stage: 2, reduce_bucket_size: 1.5}"), "expected a whole number"));
  EXPECT_TRUE(
      has(errorOf("{stage: 2, overlap_comm: maybe}"), "zero_optimization.overlap_comm: expected a boolean"));
  EXPECT_TRUE(has(errorOf("{stage: 2, offload_optimizer: {device: gpu}}"),
                  "zero_optimization.offload_optimizer.device: expected none, cpu or nvme, got 'gpu'"));
  EXPECT_TRUE(
      has(errorOf("{stage: 2, offload_optimizer: {device: cpu, ratio: 2}}"), "offload_optimizer.ratio"));
  EXPECT_TRUE(has(errorOf("{stage: 2, offload_param: {devise: none}}"),
                  "unknown key zero_optimization.offload_param.devise"));
  EXPECT_TRUE(has(errorOf("[1, 2]"), "zero_optimization must be a mapping"));
}

TEST(ZeroConfig, deepspeeds_plain_names_and_deprecated_spellings_mean_what_they_mean_there) {
  const ZeroConfig z = parse(
      "{stage: 3, prefetch_bucket_size: 123, param_persistence_threshold: 7, max_live_parameters: 5e6, "
      "max_reuse_distance: 0, gather_16bit_weights_on_model_save: true}");
  EXPECT_EQ(z.options.prefetch_bucket_size, 123);
  EXPECT_EQ(z.options.param_persistence_threshold, 7);
  EXPECT_EQ(z.options.max_live_parameters, 5000000);
  EXPECT_EQ(z.options.max_reuse_distance, 0);
  std::string notes;
  for (const auto& n : z.notes) notes += n + "\n";
  EXPECT_TRUE(has(notes, "stage3_gather_16bit_weights_on_model_save: no effect")) << notes;
  // At stage 2 the plain names are noted as stage-3 keys, as their stage3_ spellings are.
  const ZeroConfig z2 = parse("{stage: 2, max_live_parameters: 10}");
  EXPECT_TRUE(has(z2.notes.at(0), "stage3_max_live_parameters: used by ZeRO stage 3 only")) << z2.notes.at(0);
  EXPECT_TRUE(
      has(errorOf("{stage: 3, max_live_parameters: 1, stage3_max_live_parameters: 2}"),
          "zero_optimization.max_live_parameters and zero_optimization.stage3_max_live_parameters are "
          "the same key in DeepSpeed; give one of them"));
  EXPECT_TRUE(
      has(errorOf("{stage: 3, prefetch_bucket_size: -1}"), "stage3_prefetch_bucket_size: expected a whole"));
  // cpu_offload, deprecated: true is offload_optimizer {device: cpu}; false asks for nothing.
  EXPECT_EQ(parse("{stage: 2, cpu_offload: true}").offload_optimizer_device, OffloadDevice::cpu);
  EXPECT_EQ(parse("{stage: 2, cpu_offload: false}").offload_optimizer_device, OffloadDevice::none);
  EXPECT_TRUE(
      has(errorOf("{stage: 2, cpu_offload: true, offload_optimizer: {device: cpu}}"), "give one of them"));
  EXPECT_TRUE(
      has(errorOf("{stage: 2, cpu_offload: 3}"), "zero_optimization.cpu_offload: expected a boolean"));
  // cpu_offload_param, deprecated: true is offload_param {device: cpu}.
  EXPECT_EQ(parse("{stage: 3, cpu_offload_param: true}").offload_param_device, OffloadDevice::cpu);
  EXPECT_TRUE(has(errorOf("{stage: 3, cpu_offload_param: true, offload_param: {device: cpu}}"),
                  "cpu_offload_param: true is DeepSpeed's deprecated spelling of offload_param"));
  // The other plain names of stage3_ keys, at their defaults.
  EXPECT_EQ(
      errorOf("{stage: 3, model_persistence_threshold: 9223372036854775807, allgather_sequential: false}"),
      "(no error)");
  EXPECT_TRUE(has(errorOf("{stage: 3, allgather_sequential: true}"),
                  "zero_optimization.stage3_allgather_sequential is not supported yet"));
  // At stage 0 DeepSpeed builds no ZeRO optimizer and never reads offload_param (its hybrid engine
  // test sets one there).
  EXPECT_EQ(parse("{stage: 0, offload_param: {device: cpu}}").offload_param_device, OffloadDevice::none);
}
