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
  // Keys whose every value has no effect in lockstep, with the reason.
  const TrainConfig any = parseTrainConfig(
      "train_batch_size: 8\nprescale_gradients: true\ngradient_predivide_factor: 4\ncuda_visible_devices: 0\n"
      "checkpoint: {tag_validation: Fail, keep_last: 2}",
      {}, 1);
  EXPECT_EQ(any.checkpoint_keep_last, 2);
  const std::string no_effect = joined(any.notes);
  for (const char* part : {"prescale_gradients: no effect: lockstep averages f32 gradients",
                           "gradient_predivide_factor: no effect",
                           "cuda_visible_devices: no effect: DeepSpeed reads no such key",
                           "checkpoint.tag_validation: no effect"}) {
    EXPECT_TRUE(has(no_effect, part)) << part << " in\n" << no_effect;
  }
  const std::string notes = joined(c.notes);
  for (const char* key :
       {"wall_clock_breakdown: 'false' is DeepSpeed's default", "prescale_gradients",
        "gradient_predivide_factor", "flops_profiler", "hybrid_engine", "cuda_visible_devices",
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
  EXPECT_TRUE(has(errorOf("train_batch_size: 8\ngradient_allreduce_op: sum"),
                  "gradient_allreduce_op is not supported yet (summing gradients across ranks"));
  EXPECT_TRUE(has(errorOf("train_batch_size: 8\nmanaged_gradient_accumulation: false"), "set it to true"));
  EXPECT_TRUE(
      has(errorOf("train_batch_size: 8\ngradient_predivide_factor: 0"), "set it to a positive number"));
  EXPECT_TRUE(has(errorOf("train_batch_size: 8\nzero_optimization: {stage: 2, zenflow: {topk_ratio: 0.1}}"),
                  "zero_optimization.zenflow is not supported yet (ZenFlow"));
  EXPECT_TRUE(has(errorOf("train_batch_size: 8\ncheckpoint: {use_node_local_storage: true}"),
                  "checkpoint.use_node_local_storage is not supported yet (node-local checkpoint storage"));
  EXPECT_TRUE(has(errorOf("train_batch_size: 8\nhybrid_engine: {enabled: true}"), "hybrid engine"));
  EXPECT_TRUE(has(errorOf("train_batch_size: 8\nsparse_attention: {mode: fixed}"),
                  "sparse_attention is not supported yet (sparse attention)"));
  EXPECT_TRUE(
      has(errorOf("train_batch_size: 8\nzero_optimization: {stage: 2, zero_quantized_gradients: true}"),
          "zero_optimization.zero_quantized_gradients is not supported yet (ZeRO++ quantized gradients)"));
  EXPECT_TRUE(has(errorOf("train_batch_size: 8\nzero_allow_untested_optimizer: maybe"),
                  "zero_allow_untested_optimizer: expected a boolean"));
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
  // Features lockstep lacks in the optimizer, fp16 and ZeRO sections are listed together too: the
  // registry's refusal does not stop reading.
  const std::string features = errorOf(
      "train_batch_size: 8\noptimizer: {type: Lamb, params: {lr: 0.01}}\nscheduler: {type: OneCycle}\n"
      "fp16: {enabled: true, fp16_master_weights_and_grads: true}\nwall_clock_breakdown: true\n"
      "zero_optimization: {stage: 2, round_robin_gradients: true, contiguous_gradients: false}");
  EXPECT_TRUE(has(features, "config: 6 refusals:")) << features;
  for (const char* part :
       {"\n  optimizer.type: Lamb is not supported yet", "\n  scheduler.type", "\n  wall_clock_breakdown is",
        "\n  fp16.fp16_master_weights_and_grads: true is not supported yet",
        "\n  zero_optimization.round_robin_gradients: true is not supported yet",
        "\n  zero_optimization.contiguous_gradients: false is not supported yet"}) {
    EXPECT_TRUE(has(features, part)) << part << " in\n" << features;
  }
  // One refusal alone reads as before.
  EXPECT_EQ(errorOf("train_batch_size: 8\nepochs: 1\nseeed: 1"), "unknown key seeed (did you mean seed?)");
}

TEST(DeepSpeedKeys, hugging_face_auto_values_resolve_as_the_trainer_integration_resolves_them) {
  // Hugging Face Trainer's example config (transformers' docs, ds_config_zero3.json), with gpt.
  const std::string text = R"({
    "fp16": {"enabled": "auto", "loss_scale": 0, "initial_scale_power": 16},
    "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                  "warmup_num_steps": "auto", "total_num_steps": "auto"}},
    "zero_optimization": {"stage": 3, "overlap_comm": true, "contiguous_gradients": true,
      "sub_group_size": 1e9, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
      "stage3_param_persistence_threshold": "auto", "stage3_max_live_parameters": 1e9,
      "stage3_max_reuse_distance": 1e9, "stage3_gather_16bit_weights_on_model_save": true},
    "gradient_accumulation_steps": "auto", "gradient_clipping": "auto", "steps_per_print": 2000,
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "wall_clock_breakdown": false,
    "model": {"name": "gpt", "model_type": "gpt-nano"}, "data": {"dataset": "text"}})";
  // No batch size left: refused, naming the flag Trainer reads it from and what to give.
  const std::string m = errorOf(text, {}, 2);
  EXPECT_EQ(m,
            "train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps: \"auto\" needs a "
            "per-device batch size, which Hugging Face Trainer takes from --per_device_train_batch_size and "
            "lockstep's config does not have; give it with --set train_micro_batch_size_per_gpu=N");
  const TrainConfig c = parseTrainConfig(text, {"train_micro_batch_size_per_gpu=4"}, 2);
  EXPECT_EQ(c.batch.micro_batch_size, 4);
  EXPECT_EQ(c.batch.gradient_accumulation_steps, 1);
  EXPECT_EQ(c.batch.train_batch_size, 8);  // micro x accumulation x world
  EXPECT_EQ(c.precision, parallel::Precision::fp32);
  // What Trainer fills in when its flags are not given.
  EXPECT_EQ(c.gradient_clipping, 1.0);
  EXPECT_EQ(std::get<double>(c.optimizer.params.at("lr")), 5e-5);
  EXPECT_EQ(std::get<double>(c.optimizer.params.at("eps")), 1e-8);
  EXPECT_EQ(std::get<double>(c.optimizer.params.at("weight_decay")), 0.0);
  EXPECT_EQ(std::get<double>(c.scheduler.params.at("warmup_max_lr")), 5e-5);  // the optimizer's lr
  EXPECT_EQ(std::get<double>(c.scheduler.params.at("warmup_min_lr")), 0.0);
  EXPECT_EQ(c.zero.options.reduce_bucket_size, 48 * 48);  // gpt-nano: n_embd 48
  EXPECT_EQ(c.zero.options.prefetch_bucket_size, 2073);   // floor(0.9 * 48 * 48)
  EXPECT_EQ(c.zero.options.param_persistence_threshold, 480);
  const std::string notes = joined(c.notes);
  for (const char* part :
       {"train_batch_size: \"auto\" -> 8 (train_batch_size = train_micro_batch_size_per_gpu x "
        "gradient_accumulation_steps x world size: 8 = 4 x 1 x 2)",
        "optimizer.params.lr: \"auto\" -> 5.0e-5 (as Hugging Face Trainer fills it in: --learning_rate's "
        "default; --set optimizer.params.lr=VALUE gives another)",
        "gradient_clipping: \"auto\" -> 1.0 (as Hugging Face Trainer fills it in: --max_grad_norm's default",
        "fp16.enabled: \"auto\" -> false",
        "scheduler.params.warmup_max_lr: \"auto\" -> 5e-05, the optimizer's lr",
        "zero_optimization.stage3_param_persistence_threshold: \"auto\" -> 480 (10 x hidden, hidden 48 of "
        "model gpt"}) {
    EXPECT_TRUE(has(notes, part)) << part << " in\n" << notes;
  }
  // A given lr is what warmup_max_lr takes; the document keeps the resolved values.
  const TrainConfig lr =
      parseTrainConfig(text, {"train_micro_batch_size_per_gpu=4", "optimizer.params.lr=3e-4"}, 1);
  EXPECT_EQ(std::get<double>(lr.scheduler.params.at("warmup_max_lr")), 3e-4);
  EXPECT_EQ(lr.document["zero_optimization"]["reduce_bucket_size"], 2304);
}

TEST(DeepSpeedKeys, auto_values_lockstep_cannot_know_are_refused_together) {
  const std::string m = errorOf(
      R"({"train_micro_batch_size_per_gpu": "auto", "wall_clock_breakdown": true, "model": "mnist_cnn",
          "data": {"dataset": "synthetic", "input_shape": [1, 28, 28]},
          "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto"}})");
  EXPECT_TRUE(has(m, "config: 4 refusals:")) << m;
  for (const char* part : {"\n  wall_clock_breakdown is not supported yet",
                           "\n  train_micro_batch_size_per_gpu: \"auto\" needs a per-device",
                           "\n  zero_optimization.reduce_bucket_size: \"auto\" is hidden x hidden in Hugging "
                           "Face Trainer, and model "
                           "mnist_cnn has no hidden size",
                           "\n  zero_optimization.stage3_prefetch_bucket_size: \"auto\" is filled in by "
                           "Hugging Face Trainer at ZeRO "
                           "stage 3 only; at stage 2 DeepSpeed refuses it too"}) {
    EXPECT_TRUE(has(m, part)) << part << " in\n" << m;
  }
  // An "auto" the integration does not fill in is left to its key, as DeepSpeed gets it.
  EXPECT_TRUE(
      has(errorOf("train_batch_size: 8\nzero_optimization: {stage: 3, stage3_max_live_parameters: auto}"),
          "zero_optimization.stage3_max_live_parameters: expected a whole number >= 0, got 'auto'"));
  // lockstep's own keys whose value may be auto keep it.
  const TrainConfig own = parseTrainConfig("train_batch_size: 8\nbackend: auto\ncuda_graph: auto", {}, 1);
  EXPECT_EQ(own.backend, "auto");
  EXPECT_EQ(own.cuda_graph, CudaGraph::automatic);
}

// Every key of DeepSpeed's config documentation (docs/_pages/config-json.md, August 2026) is
// recognised: implemented, accepted with a note, or "not supported yet" naming the feature, never
// "unknown key". Each is tried with a value of its documented type.
TEST(DeepSpeedKeys, every_key_of_deepspeeds_config_documentation_is_recognised) {
  const std::vector<std::pair<std::string, std::string>> documented = {
      {"", "managed_gradient_accumulation: true"},
      {"", "communication_data_type: fp16"},
      {"", "gradient_allreduce_op: sum"},
      {"", "prescale_gradients: true"},
      {"", "gradient_predivide_factor: 2"},
      {"", "sparse_gradients: true"},
      {"", "amp: {enabled: true, opt_level: O1}"},
      {"",
       "torch_autocast: {enabled: true, dtype: bfloat16, lower_precision_safe_modules: [torch.nn.Linear]}"},
      {"", "gradient_clipping: 1.0"},
      {"", "steps_per_print: 10"},
      {"", "wall_clock_breakdown: true"},
      {"", "dump_state: true"},
      {"", "memory_breakdown: true"},
      {"", "autotuning: {enabled: true, results_dir: r, exps_dir: e, overwrite: false, metric: throughput}"},
      {"",
       "flops_profiler: {enabled: true, profile_step: 1, module_depth: -1, top_modules: 1, detailed: true}"},
      {"", "sparse_attention: {mode: fixed, block: 16}"},
      {"", "data_efficiency: {enabled: true, seed: 1234}"},
      {"", "curriculum_learning: {enabled: true, curriculum_type: seqlen}"},
      {"", "tensorboard: {enabled: false, output_path: out, job_name: j}"},
      {"", "wandb: {enabled: true, group: g, team: t, project: p}"},
      {"",
       "comet: {enabled: true, workspace: w, project: p, samples_log_interval: 50, online: false, mode: "
       "get}"},
      {"", "csv_monitor: {enabled: false, output_path: out, job_name: j}"},
      {"", "elasticity: {enabled: true, max_train_batch_size: 2000}"},
      {"", "comms_logger: {enabled: true, verbose: false, prof_all: true, debug: false}"},
      {"", "compression_training: {weight_quantization: {shared_parameters: {enabled: true}}}"},
      {"",
       "checkpoint: {tag_validation: Warn, load_universal: false, use_node_local_storage: false, "
       "parallel_write: {pipeline_stage: false}}"},
      {"", "compile: {deepcompile: true, passes: [autosp], offload_activation: false}"},
      {"", "data_types: {grad_accum_dtype: fp32}"},
      {"",
       "aio: {block_size: 1048576, queue_depth: 8, thread_count: 1, "
       "single_submit: false, overlap_events: true}"},
      {"", "tensor_parallel: {autotp_size: 4, preset_model: llama, tp_overlap_comm: false}"},
      {"", "hybrid_engine: {enabled: true, max_out_tokens: 512, enable_cuda_graph: false}"},
      {"", "expert_parallel: {enabled: true, autoep_size: 4, preset_model: mixtral}"},
      {"",
       "activation_checkpointing: {partition_activations: false, cpu_checkpointing: false, "
       "contiguous_memory_optimization: false, number_checkpoints: null, synchronize_checkpoint_boundary: "
       "false, profile: false}"},
      {"",
       "fp16: {enabled: true, auto_cast: false, loss_scale: 0, initial_scale_power: 16, loss_scale_window: "
       "1000, hysteresis: 2, consecutive_hysteresis: false, min_loss_scale: 1, "
       "fp16_master_weights_and_grads: false}"},
      {"", "bf16: {enabled: false, bf16_master_weights_and_grads: true, bf16_optimizer_states: true}"},
      {"", "optimizer: {type: Adam, params: {lr: 0.001, torch_adam: false, adam_w_mode: true}}"},
      {"", "scheduler: {type: WarmupLR, params: {warmup_min_lr: 0, warmup_max_lr: 0.001}}"},
  };
  const std::vector<std::string> zero = {"allgather_partitions: true",
                                         "allgather_bucket_size: 5e8",
                                         "overlap_comm: false",
                                         "reduce_scatter: true",
                                         "reduce_bucket_size: 5e8",
                                         "contiguous_gradients: true",
                                         "load_from_fp32_weights: true",
                                         "grad_hooks: true",
                                         "round_robin_gradients: true",
                                         "stage3_max_live_parameters: 1e9",
                                         "stage3_max_reuse_distance: 1e9",
                                         "stage3_prefetch_bucket_size: 5e8",
                                         "stage3_param_persistence_threshold: 1e5",
                                         "stage3_gather_16bit_weights_on_model_save: false",
                                         "stage3_module_granularity_threshold: 0",
                                         "zero_hpz_partition_size: 1",
                                         "zero_quantized_weights: false",
                                         "zero_quantized_gradients: false",
                                         "log_trace_cache_warnings: false",
                                         "cpu_offload: false",
                                         "sub_group_size: 1e12",
                                         "elastic_checkpoint: false",
                                         "ignore_unused_parameters: true",
                                         "save_muon_momentum_buffer_in_memory: true",
                                         "offload_param: {device: cpu, nvme_path: /local_nvme, pin_memory: "
                                         "true, buffer_count: 5, buffer_size: 1e8, "
                                         "max_in_cpu: 1e9}",
                                         "offload_optimizer: {device: cpu, nvme_path: /local_nvme, "
                                         "pin_memory: true, ratio: 0.3, buffer_count: 4, "
                                         "fast_init: false}"};
  std::vector<std::string> texts;
  for (const auto& [section, text] : documented) texts.push_back("train_batch_size: 8\n" + text);
  for (const auto& z : zero) texts.push_back("train_batch_size: 8\nzero_optimization: {stage: 3, " + z + "}");
  for (const std::string& t : texts) {
    const std::string m = errorOf(t);
    EXPECT_FALSE(has(m, "unknown key")) << t << "\n" << m;
  }
}
