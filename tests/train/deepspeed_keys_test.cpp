// DeepSpeed configs as written: keys lockstep has no feature for are accepted at DeepSpeed's
// default or off value (with a note) and otherwise "not supported yet" naming the feature, and one
// parse reports every refused key at once.
#include <gtest/gtest.h>

#include "lockstep/train/config/config.h"
#include "lockstep/util/error.h"
#include "train/config_test_util.h"

using namespace lockstep;
using namespace lockstep::train;
using namespace lockstep::test;

namespace {

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

}  // namespace

TEST(DeepSpeedKeys, default_and_off_values_are_accepted_with_a_note) {
  const TrainConfig c = parseTrainConfig(
      R"({"train_batch_size": 8, "wall_clock_breakdown": false, "prescale_gradients": false,
          "gradient_predivide_factor": 1.0, "zero_allow_untested_optimizer": true, "steps_per_print": 2000,
          "memory_breakdown": false, "sparse_gradients": false, "fp32_allreduce": false,
          "communication_data_type": null, "flops_profiler": {"enabled": false, "profile_step": 1},
          "wandb": {"enabled": false, "project": "x"}, "torch_autocast": {"enabled": false},
          "hybrid_engine": {"enabled": false}, "cuda_visible_devices": null,
          "data_types": {"grad_accum_dtype": null}, "bf16": {"enabled": false, "bf16_master_weights_and_grads": false},
          "zero_optimization": {"stage": 2, "memory_efficient_linear": false, "ignore_unused_parameters": true,
                                "zero_quantized_weights": false, "mics_shard_size": -1}})",
      {}, 1, "ds.json");
  EXPECT_EQ(c.steps_per_print, 2000);
  const std::string notes = joined(c.notes);
  for (const char* key :
       {"wall_clock_breakdown: 'false' is DeepSpeed's default", "prescale_gradients",
        "gradient_predivide_factor", "zero_allow_untested_optimizer: no effect", "flops_profiler",
        "torch_autocast", "hybrid_engine", "cuda_visible_devices", "bf16.bf16_master_weights_and_grads",
        "zero_optimization.memory_efficient_linear", "zero_optimization.ignore_unused_parameters",
        "zero_optimization.mics_shard_size"}) {
    EXPECT_TRUE(has(notes, key)) << key << " in\n" << notes;
  }
}

TEST(DeepSpeedKeys, other_values_are_not_supported_yet_naming_the_feature) {
  EXPECT_EQ(
      errorOf("train_batch_size: 8\nwall_clock_breakdown: true"),
      "wall_clock_breakdown is not supported yet (the wall-clock breakdown of forward, backward and step "
      "(progress prints step times)); remove it or set it to false");
  EXPECT_TRUE(has(errorOf("train_batch_size: 8\nprescale_gradients: true"),
                  "prescale_gradients is not supported yet (dividing gradients by the world size"));
  EXPECT_TRUE(has(errorOf("train_batch_size: 8\ngradient_predivide_factor: 2"), "set it to 1.0"));
  EXPECT_TRUE(has(errorOf("train_batch_size: 8\ntorch_autocast: {enabled: true}"),
                  "torch_autocast is not supported yet (torch.autocast"));
  EXPECT_TRUE(has(errorOf("train_batch_size: 8\nhybrid_engine: {enabled: true}"), "hybrid engine"));
  EXPECT_TRUE(has(errorOf("train_batch_size: 8\ncuda_visible_devices: '0,1'"), "CUDA_VISIBLE_DEVICES"));
  EXPECT_TRUE(has(errorOf("train_batch_size: 8\nsparse_attention: {mode: fixed}"),
                  "sparse_attention is not supported yet (sparse attention)"));
  EXPECT_TRUE(has(errorOf("train_batch_size: 8\nbf16: {enabled: true, bf16_master_weights_and_grads: true}"),
                  "bf16.bf16_master_weights_and_grads is not supported yet"));
  EXPECT_TRUE(
      has(errorOf("train_batch_size: 8\nzero_optimization: {stage: 2, zero_quantized_gradients: true}"),
          "zero_optimization.zero_quantized_gradients is not supported yet (ZeRO++ quantized gradients)"));
  EXPECT_TRUE(
      has(errorOf("train_batch_size: 8\nzero_allow_untested_optimizer: maybe"), "set it to true or false"));
  // A typo of a DeepSpeed key is still unknown, with the DeepSpeed key suggested.
  EXPECT_TRUE(has(errorOf("train_batch_size: 8\nwall_clock_breakdwn: false"),
                  "unknown key wall_clock_breakdwn (did you mean wall_clock_breakdown?)"));
}

TEST(DeepSpeedKeys, every_refused_key_is_reported_in_one_error) {
  const std::string m = errorOf(
      "train_batch_size: 8\nwall_clock_breakdown: true\nfoo: 1\nzero_optimization: {stage: 1, bar: 2}\n"
      "fp16: {enabled: false, baz: 3}");
  EXPECT_TRUE(has(m, "config: 4 refusals:")) << m;
  for (const char* part : {"\n  wall_clock_breakdown is not supported yet", "\n  unknown key foo",
                           "\n  unknown key zero_optimization.bar", "\n  unknown key fp16.baz"}) {
    EXPECT_TRUE(has(m, part)) << part << " in\n" << m;
  }
  // An error that stops the parse comes last, after the refusals found before it.
  const std::string typed = errorOf("train_batch_size: 8\nfoo: 1\nepochs: many");
  EXPECT_TRUE(has(typed, "1 refusal:\n  unknown key foo")) << typed;
  EXPECT_TRUE(has(typed, "\n  epochs: expected an integer")) << typed;
  // One refusal alone reads as before.
  EXPECT_EQ(errorOf("train_batch_size: 8\nepochs: 1\nseeed: 1"), "unknown key seeed (did you mean seed?)");
}

TEST(DeepSpeedKeys, hugging_face_auto_values_are_all_named_in_one_error) {
  const std::string m = errorOf(
      R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_clipping": "auto",
          "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "weight_decay": 0.0}},
          "fp16": {"enabled": "auto"}, "wall_clock_breakdown": true})");
  EXPECT_TRUE(
      has(m,
          "6 values are \"auto\" (train_batch_size, train_micro_batch_size_per_gpu, gradient_clipping, "
          "optimizer.params.lr, optimizer.params.betas, fp16.enabled): Hugging Face Trainer"))
      << m;
  EXPECT_TRUE(has(m, "give each a value (or --set KEY=VALUE)")) << m;
  EXPECT_TRUE(has(m, "\n  wall_clock_breakdown is not supported yet")) << m;
  // One "auto" alone, after --set fills the others, reads as one error.
  EXPECT_EQ(
      errorOf("train_batch_size: 8\ngradient_clipping: auto"),
      "1 value is \"auto\" (gradient_clipping): Hugging Face Trainer fills these in from its arguments, "
      "which lockstep does not have; give each a value (or --set KEY=VALUE)");
  const TrainConfig c = parseTrainConfig("train_batch_size: auto\ngradient_clipping: auto",
                                         {"train_batch_size=8", "gradient_clipping=1.0"}, 1);
  EXPECT_EQ(c.batch.train_batch_size, 8);
  // lockstep's own keys whose value may be auto keep it.
  const TrainConfig own = parseTrainConfig("train_batch_size: 8\nbackend: auto\ncuda_graph: auto", {}, 1);
  EXPECT_EQ(own.backend, "auto");
  EXPECT_EQ(own.cuda_graph, CudaGraph::automatic);
}
