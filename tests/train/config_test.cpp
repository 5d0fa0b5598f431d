// Config resolution as pure functions: DeepSpeed batch-size arithmetic, unknown keys with
// suggestions, wrong types, unsupported sections, --set overrides, YAML and JSON alike.
#include "lockstep/train/config/config.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/launch/worker_env.h"
#include "lockstep/tensor/device.h"
#include "lockstep/train/run_setup.h"
#include "lockstep/util/error.h"
#include "train/config_test_util.h"

using namespace lockstep;
using namespace lockstep::train;
using namespace lockstep::test;

namespace {}  // namespace

TEST(TrainConfig, batch_sizes_any_two_fix_the_third) {
  auto b = resolveBatchSizes(64, 8, std::nullopt, 2);
  EXPECT_EQ(b.gradient_accumulation_steps, 4);
  b = resolveBatchSizes(64, std::nullopt, 4, 2);
  EXPECT_EQ(b.micro_batch_size, 8);
  b = resolveBatchSizes(std::nullopt, 8, 4, 2);
  EXPECT_EQ(b.train_batch_size, 64);
  b = resolveBatchSizes(std::nullopt, 32, std::nullopt, 3);
  EXPECT_EQ(b.train_batch_size, 96);
  EXPECT_EQ(b.gradient_accumulation_steps, 1);
  b = resolveBatchSizes(64, 8, 4, 2);
  EXPECT_EQ(b.train_batch_size, 64);
  b = resolveBatchSizes(60, std::nullopt, std::nullopt, 3);
  EXPECT_EQ(b.micro_batch_size, 20);
}

// Products past int64 are refused, named, instead of wrapping around (2^62 x 4 ranks was 0: a
// division by zero, SIGFPE; 2^62 + 1 x 4 was 4, which passed the consistency check).
TEST(TrainConfig, batch_sizes_whose_product_overflows_are_refused) {
  const int64_t huge = int64_t{1} << 62;
  auto refused = [&](std::optional<int64_t> train, std::optional<int64_t> micro,
                     std::optional<int64_t> accum) {
    try {
      resolveBatchSizes(train, micro, accum, 4);
      ADD_FAILURE() << "accepted";
    } catch (const ValueError& e) {
      EXPECT_TRUE(has(e.what(), "2^63 - 1")) << e.what();
    }
  };
  refused(8, huge, std::nullopt);
  refused(8, std::nullopt, huge);
  refused(std::nullopt, huge, 4);
  refused(std::nullopt, huge, std::nullopt);
  refused(4, huge + 1, 4);
}

TEST(TrainConfig, inconsistent_batch_sizes_name_all_three_and_the_world) {
  try {
    resolveBatchSizes(64, 8, 3, 2);
    FAIL();
  } catch (const ValueError& e) {
    std::string m = e.what();
    EXPECT_TRUE(has(m, "train_batch_size=64") && has(m, "train_micro_batch_size_per_gpu=8") &&
                has(m, "gradient_accumulation_steps=3") && has(m, "world size 2"))
        << m;
  }
  EXPECT_THROW(resolveBatchSizes(65, 8, std::nullopt, 2), ValueError);
  EXPECT_THROW(resolveBatchSizes(std::nullopt, std::nullopt, std::nullopt, 1), ValueError);
  EXPECT_THROW(resolveBatchSizes(std::nullopt, 0, std::nullopt, 1), ValueError);
}

TEST(TrainConfig, yaml_with_every_section) {
  auto c = parseTrainConfig(R"(
model: {name: mlp, hidden: [16, 8]}
data: {dataset: synthetic, size: 100, input_shape: [4], num_classes: 3, val_split: 0.1,
       transforms: {normalize: {mean: 0.5, std: 0.25}}}
train_micro_batch_size_per_rank: 4
gradient_accumulation_steps: 2
optimizer: {type: AdamW, params: {lr: 0.01, betas: [0.8, 0.9], eps: 1.0e-6, weight_decay: 0.1}}
scheduler: {type: WarmupDecayLR, params: {warmup_num_steps: 10, total_num_steps: 100, warmup_type: linear}}
gradient_clipping: 1.0
steps_per_print: 5
epochs: 3
max_steps: 40
seed: 7
checkpoint: {dir: /tmp/x, every_steps: 10, keep_last: 2}
eval: {every_epochs: 2}
tensorboard: {enabled: true, output_path: tb, job_name: j}
csv_monitor: {enabled: true}
fp16: {enabled: false}
)",
                            {}, 2);
  EXPECT_EQ(c.model, "mlp");
  EXPECT_EQ(c.model_options.hidden, (std::vector<int64_t>{16, 8}));
  EXPECT_EQ(c.batch.train_batch_size, 16);
  EXPECT_EQ(c.optimizer.type, "AdamW");
  EXPECT_EQ(c.optimizer.params.at("betas"), optim::SpecValue(std::vector<double>{0.8, 0.9}));
  EXPECT_EQ(c.optimizer.params.at("eps"), optim::SpecValue(1.0e-6));
  EXPECT_EQ(c.optimizer.params.at("weight_decay"), optim::SpecValue(0.1));
  EXPECT_EQ(c.scheduler.type, "WarmupDecayLR");
  EXPECT_EQ(c.scheduler.params.at("total_num_steps"), optim::SpecValue(int64_t{100}));
  EXPECT_EQ(c.scheduler.params.at("warmup_type"), optim::SpecValue(std::string("linear")));
  EXPECT_EQ(c.checkpoint_keep_last, 2);
  EXPECT_EQ(c.eval_every_epochs, 2);
  EXPECT_TRUE(c.tensorboard.enabled);
  EXPECT_EQ(c.tensorboard.job_name, "j");
  EXPECT_DOUBLE_EQ(*c.data.normalize_mean, 0.5);
  EXPECT_EQ(c.seed, 7u);
}

TEST(TrainConfig, json_deepspeed_style) {
  auto c = parseTrainConfig(R"({"train_batch_size": 32, "gradient_accumulation_steps": 1,
    "optimizer": {"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9}},
    "scheduler": {"type": "StepLR", "params": {"step_size": 5, "gamma": 0.5}},
    "model": "linear"})",
                            {}, 4);
  EXPECT_EQ(c.batch.micro_batch_size, 8);
  EXPECT_EQ(c.optimizer.type, "SGD");
  EXPECT_EQ(c.optimizer.params.at("momentum"), optim::SpecValue(0.9));
  EXPECT_EQ(c.scheduler.params.at("step_size"), optim::SpecValue(int64_t{5}));
  EXPECT_EQ(c.model, "linear");
}

TEST(TrainConfig, unknown_key_names_its_path_and_suggests) {
  std::string m = errorOf("train_batch_size: 8\noptimizer: {type: Adam, params: {lrr: 0.1}}");
  EXPECT_TRUE(has(m, "unknown key optimizer.params.lrr") && has(m, "did you mean optimizer.params.lr?")) << m;
  m = errorOf("train_batch_size: 8\nepoch: 3");
  EXPECT_TRUE(has(m, "unknown key epoch") && has(m, "did you mean epochs?")) << m;
  m = errorOf("train_batch_size: 8\ndata: {datset: mnist}");
  EXPECT_TRUE(has(m, "data.datset") && has(m, "data.dataset")) << m;
}

TEST(TrainConfig, dataset_names_and_their_keys_come_from_the_registry) {
  std::string m = errorOf("train_batch_size: 8\ndata: {dataset: cifar}");
  EXPECT_TRUE(has(m, "unknown dataset cifar") && has(m, "did you mean cifar10?") &&
              has(m, "fashion_mnist, mnist, cifar10, image_folder, synthetic, text, tokens"))
      << m;
  // a key another dataset reads is refused, not ignored
  m = errorOf("train_batch_size: 8\ndata: {dataset: mnist, input_shape: [4]}");
  EXPECT_TRUE(has(m, "data.input_shape is read only by synthetic, not by mnist")) << m;
  EXPECT_EQ(errorOf("train_batch_size: 8\ndata: {dataset: synthetic, input_shape: [4]}"), "(no error)");
}

// model.num_classes on an mlp was accepted and did nothing (its outputs are out_features).
TEST(TrainConfig, a_model_key_the_model_does_not_read_is_refused) {
  std::string m = errorOf("train_batch_size: 8\nmodel: {name: mlp, num_classes: 3}");
  EXPECT_TRUE(has(m, "model.num_classes is not read by mlp: its outputs are model.out_features")) << m;
  m = errorOf("train_batch_size: 8\nmodel: {name: cifar_cnn, out_features: 3}");
  EXPECT_TRUE(has(m,
                  "model.out_features is read only by linear and mlp, not by cifar_cnn: its outputs are "
                  "model.num_classes"))
      << m;
  m = errorOf("train_batch_size: 8\nmodel: {name: resnet18, hidden: [4]}");
  EXPECT_TRUE(has(m, "model.hidden is read only by linear and mlp, not by resnet18")) << m;
  EXPECT_EQ(errorOf("train_batch_size: 8\nmodel: {name: mlp, out_features: 3, hidden: [4]}"), "(no error)");
  EXPECT_EQ(errorOf("train_batch_size: 8\nmodel: {name: cifar_cnn, num_classes: 3}"), "(no error)");
}

TEST(TrainConfig, image_folder_reads_its_own_keys_and_needs_a_root) {
  const TrainConfig c = parseTrainConfig(
      "train_batch_size: 8\ndata: {dataset: image_folder, root: /data/imagenet, image_size: 160, "
      "resize_size: 182, "
      "skip_bad_files: true, exif_transpose: true, train_list: train.txt}",
      {}, 1);
  EXPECT_EQ(c.data.image_size, 160);
  EXPECT_EQ(c.data.resize_size, 182);
  EXPECT_TRUE(c.data.skip_bad_files);
  EXPECT_TRUE(c.data.exif_transpose);
  EXPECT_FALSE(c.data.dct_scaling);
  EXPECT_EQ(c.data.train_list, "train.txt");
  EXPECT_TRUE(has(errorOf("train_batch_size: 8\ndata: {dataset: image_folder}"), "make-image-folder"));
  EXPECT_TRUE(has(errorOf("train_batch_size: 8\ndata: {dataset: image_folder, root: /d, image_size: 0}"),
                  "data.image_size must be in [1, 65535]"));
  std::string m = errorOf("train_batch_size: 8\ndata: {dataset: mnist, skip_bad_files: true}");
  EXPECT_TRUE(has(m, "data.skip_bad_files is read only by image_folder, not by mnist")) << m;
}

// image_folder's transforms take torchvision's parameters; the tensor datasets' transforms are
// theirs, and each is refused where it does not apply.
TEST(TrainConfig, image_folder_transforms_take_torchvisions_parameters) {
  const std::string head = "train_batch_size: 8\ndata:\n  dataset: image_folder\n  root: /d\n  transforms:\n";
  const TrainConfig plain =
      parseTrainConfig("train_batch_size: 8\ndata: {dataset: image_folder, root: /d}", {}, 1);
  EXPECT_EQ(plain.data.crop_scale, (std::array<double, 2>{0.08, 1.0}));
  EXPECT_TRUE(plain.data.image_horizontal_flip);
  EXPECT_EQ(plain.data.color_jitter, (std::array<double, 4>{0, 0, 0, 0}));
  const TrainConfig c =
      parseTrainConfig(head +
                           "    random_resized_crop: {scale: [0.35, 1.0], ratio: [0.5, 2.0]}\n"
                           "    horizontal_flip: false\n"
                           "    color_jitter: {brightness: 0.4, contrast: 0.3, saturation: 0.2, hue: 0.1}\n"
                           "    normalize: {mean: 0.5, std: 0.25}\n",
                       {}, 1);
  EXPECT_EQ(c.data.crop_scale, (std::array<double, 2>{0.35, 1.0}));
  EXPECT_EQ(c.data.crop_ratio, (std::array<double, 2>{0.5, 2.0}));
  EXPECT_FALSE(c.data.image_horizontal_flip);
  EXPECT_FALSE(c.data.horizontal_flip);  // the tensor datasets' flip stays off
  EXPECT_EQ(c.data.color_jitter, (std::array<double, 4>{0.4, 0.3, 0.2, 0.1}));
  EXPECT_EQ(c.data.normalize_mean, 0.5);
  EXPECT_TRUE(has(errorOf(head + "    random_resized_crop: {scale: [0.9, 0.1]}\n"),
                  "data.transforms.random_resized_crop.scale: expected 0 < min <= max"));
  EXPECT_TRUE(has(errorOf(head + "    random_resized_crop: {ratio: [0.5]}\n"), "expected two numbers"));
  EXPECT_TRUE(has(errorOf(head + "    random_crop: true\n"), "random_crop is not image_folder's"));
  EXPECT_TRUE(has(errorOf(head + "    color_jitter: {gamma: 1}\n"), "gamma"));
  EXPECT_TRUE(has(errorOf(head + "    color_jitter: {hue: 0.7}\n"),
                  "data.transforms.color_jitter.hue must be in [0, 0.5]"));
  EXPECT_TRUE(has(errorOf(head + "    color_jitter: {brightness: -1}\n"), "brightness must be >= 0"));
  EXPECT_TRUE(
      has(errorOf("train_batch_size: 8\ndata: {dataset: cifar10, transforms: {color_jitter: {hue: 0.1}}}"),
          "data.transforms.color_jitter is read only by image_folder, not by cifar10"));
  // to_dtype: bf16 images for a bf16 run only.
  EXPECT_EQ(plain.data.image_dtype, DType::f32);
  EXPECT_EQ(
      parseTrainConfig(head + "    to_dtype: bfloat16\nbf16: {enabled: true}\n", {}, 1).data.image_dtype,
      DType::bf16);
  EXPECT_TRUE(has(errorOf(head + "    to_dtype: bfloat16\n"), "to_dtype: bfloat16 needs bf16.enabled: true"));
  EXPECT_TRUE(has(errorOf(head + "    to_dtype: float16\n"), "expected float32 or bfloat16"));
}

TEST(TrainConfig, backend_must_be_a_built_backend) {
  EXPECT_EQ(parseTrainConfig("train_batch_size: 8\nbackend: gloo", {}, 1).backend, "gloo");
  std::string m = errorOf("train_batch_size: 8\nbackend: nccl");
  if (builtWithCuda()) {
    EXPECT_EQ(m, "(no error)");  // nccl is built; whether a GPU is there is the group's to say
  } else {
    EXPECT_TRUE(has(m, "backend nccl is not built into this lockstep") && has(m, "built: shm, gloo")) << m;
  }
  m = errorOf("train_batch_size: 8\nbackend: shmem");
  EXPECT_TRUE(has(m, "unknown backend 'shmem' (did you mean shm?)")) << m;
}

TEST(TrainConfig, wrong_type_names_key_and_expected_type) {
  std::string m = errorOf("train_batch_size: 8\nepochs: many");
  EXPECT_TRUE(has(m, "epochs") && has(m, "expected an integer") && has(m, "'many'")) << m;
  m = errorOf("train_batch_size: 8\noptimizer: {params: {lr: [1, 2]}}");
  EXPECT_TRUE(has(m, "optimizer.params.lr") && has(m, "expected a number")) << m;
  m = errorOf("train_batch_size: 8\ncsv_monitor: {enabled: maybe}");
  EXPECT_TRUE(has(m, "csv_monitor.enabled") && has(m, "expected a boolean")) << m;
}

TEST(TrainConfig, unsupported_sections_are_rejected) {
  EXPECT_TRUE(has(errorOf("train_batch_size: 8\nflops_profiler: {enabled: true}"),
                  "flops_profiler is not supported yet (the FLOPs profiler)"));
  EXPECT_TRUE(has(errorOf("train_batch_size: 8\noptimizer: {type: Lamb}"), "Lamb is not supported yet"));
  EXPECT_TRUE(
      has(errorOf("train_batch_size: 8\nscheduler: {type: OneCycle}"), "OneCycle is not supported yet"));
}

TEST(TrainConfig, set_overrides_parse_yaml_scalars) {
  auto c = parseTrainConfig(
      "train_batch_size: 8\noptimizer: {type: Adam, params: {lr: 0.1}}",
      {"optimizer.params.lr=0.5", "epochs=4", "data.dataset=synthetic", "model.name=mlp", "model.hidden=[3]"},
      1);
  EXPECT_EQ(c.optimizer.params.at("lr"), optim::SpecValue(0.5));
  EXPECT_EQ(c.epochs, 4);
  EXPECT_EQ(c.model_options.hidden, std::vector<int64_t>{3});
  EXPECT_TRUE(has(errorOf("train_batch_size: 8", {"epochs"}), "expected key=value"));
  EXPECT_TRUE(has(errorOf("train_batch_size: 8", {"optimizer.params.lrr=1"}), "optimizer.params.lrr"));
}

TEST(TrainConfig, inconsistent_batch_in_config_uses_world) {
  std::string m = errorOf(
      "train_batch_size: 64\ntrain_micro_batch_size_per_gpu: 8\ngradient_accumulation_steps: 2", {}, 3);
  EXPECT_TRUE(has(m, "world size 3")) << m;
}

TEST(TrainConfig, ddp_section_takes_pytorchs_option_names) {
  auto c = parseTrainConfig("train_batch_size: 8", {}, 1);
  EXPECT_EQ(c.ddp.comm_hook, "allreduce");
  EXPECT_FALSE(c.ddp.gradient_as_bucket_view);
  EXPECT_DOUBLE_EQ(c.ddp.bucket_cap_mb, 25.0);
  c = parseTrainConfig(
      "train_batch_size: 8\nddp: {bucket_cap_mb: 4, find_unused_parameters: true, gradient_as_bucket_view: "
      "true, "
      "broadcast_buffers: false, comm_hook: bf16_compress}",
      {}, 1);
  EXPECT_DOUBLE_EQ(c.ddp.bucket_cap_mb, 4.0);
  EXPECT_TRUE(c.ddp.find_unused_parameters);
  EXPECT_TRUE(c.ddp.gradient_as_bucket_view);
  EXPECT_FALSE(c.ddp.broadcast_buffers);
  EXPECT_EQ(c.ddp.comm_hook, "bf16_compress");
  EXPECT_EQ(parseTrainConfig("train_batch_size: 8", {"ddp.comm_hook=noop"}, 1).ddp.comm_hook, "noop");
  std::string m = errorOf("train_batch_size: 8\nddp: {gradient_as_bucket_veiw: true}");
  EXPECT_TRUE(has(m, "unknown key ddp.gradient_as_bucket_veiw") &&
              has(m, "did you mean ddp.gradient_as_bucket_view?"))
      << m;
  m = errorOf("train_batch_size: 8\nddp: {comm_hook: fp8_compress}");
  EXPECT_TRUE(has(m, "ddp.comm_hook: unknown comm_hook 'fp8_compress'") && has(m, "fp16_compress")) << m;
  m = errorOf("train_batch_size: 8\nddp: {bucket_cap_mb: 0}");
  EXPECT_TRUE(has(m, "ddp.bucket_cap_mb must be positive")) << m;
  m = errorOf("train_batch_size: 8\nddp: {find_unused_parameters: sometimes}");
  EXPECT_TRUE(has(m, "ddp.find_unused_parameters") && has(m, "expected a boolean")) << m;
}

TEST(TrainConfig, deepspeed_adam_keys_parse_and_reach_the_registry) {
  auto c = parseTrainConfig(
      "train_batch_size: 8\noptimizer: {type: Adam, params: {lr: 1.0e-3, adam_w_mode: false, torch_adam: "
      "true}}",
      {}, 1);
  EXPECT_EQ(c.optimizer.type, "Adam");
  EXPECT_EQ(c.optimizer.params.at("adam_w_mode"), optim::SpecValue(false));
  EXPECT_EQ(c.optimizer.params.at("torch_adam"), optim::SpecValue(true));
  c = parseTrainConfig(
      R"({"train_batch_size": 8, "optimizer": {"type": "adamw", "params": {"adam_w_mode": true}}})", {}, 1);
  EXPECT_EQ(c.optimizer.type, "adamw");  // DeepSpeed lower-cases its own optimizers' names
  EXPECT_NO_THROW(optim::validateOptimizerSpec(c.optimizer));
  c = parseTrainConfig("train_batch_size: 8", {"optimizer.params.adam_w_mode=false"}, 1);
  EXPECT_EQ(c.optimizer.params.at("adam_w_mode"), optim::SpecValue(false));
}

TEST(TrainConfig, yaml_values_become_typed_spec_values) {
  auto c = parseTrainConfig(R"(
train_batch_size: 8
optimizer: {type: SGD, params: {lr: 1, momentum: 0.5, nesterov: true}}
scheduler: {type: MultiStepLR, params: {milestones: [2, 4], gamma: 0.5}}
)",
                            {}, 1);
  EXPECT_EQ(c.optimizer.params.at("lr"), optim::SpecValue(int64_t{1}));
  EXPECT_EQ(c.optimizer.params.at("momentum"), optim::SpecValue(0.5));
  EXPECT_EQ(c.optimizer.params.at("nesterov"), optim::SpecValue(true));
  EXPECT_EQ(c.scheduler.params.at("milestones"), optim::SpecValue(std::vector<double>{2, 4}));
  EXPECT_EQ(c.scheduler.params.at("gamma"), optim::SpecValue(0.5));
  // A quoted value is a string, as in JSON.
  std::string m = errorOf(R"({"train_batch_size": 8, "optimizer": {"params": {"lr": "0.1"}}})");
  EXPECT_TRUE(has(m, "optimizer.params.lr: expected a number, got '0.1'")) << m;
  m = errorOf("train_batch_size: 8\noptimizer: {params: {betas: [0.9, x]}}");
  EXPECT_TRUE(has(m, "optimizer.params.betas[1]: expected a number, got 'x'")) << m;
  m = errorOf("train_batch_size: 8\noptimizer: {params: {lr: {value: 1}}}");
  EXPECT_TRUE(has(m, "optimizer.params.lr: expected a value or a list of numbers, got a mapping")) << m;
  m = errorOf("train_batch_size: 8\noptimizer: {params: [1, 2]}");
  EXPECT_TRUE(has(m, "optimizer.params must be a mapping")) << m;
}

TEST(TrainConfig, optimizer_and_scheduler_errors_name_the_key) {
  std::string m = errorOf("train_batch_size: 8\noptimizer: {type: SGD, params: {betas: [0.9, 0.99]}}");
  EXPECT_TRUE(has(m, "unknown key optimizer.params.betas") && has(m, "SGD takes")) << m;
  m = errorOf("train_batch_size: 8\noptimizer: {type: Adam, params: {weight_decay: -1}}");
  EXPECT_TRUE(has(m, "optimizer.params.weight_decay: must be >= 0, got -1")) << m;
  m = errorOf("train_batch_size: 8\noptimizer: {type: sgd}");
  EXPECT_TRUE(has(m, "optimizer.type: sgd") && has(m, "did you mean SGD?")) << m;
  m = errorOf("train_batch_size: 8\nscheduler: {type: StepLR, params: {step_sise: 2}}");
  EXPECT_TRUE(has(m, "unknown key scheduler.params.step_sise (did you mean scheduler.params.step_size?)"))
      << m;
  m = errorOf("train_batch_size: 8\nscheduler: {params: {step_size: 2}}");
  EXPECT_TRUE(has(m, "scheduler.type: missing")) << m;
  m = errorOf("train_batch_size: 8\noptimizer: {typ: Adam}");
  EXPECT_TRUE(has(m, "unknown key optimizer.typ (did you mean optimizer.type?)")) << m;
}

TEST(TrainConfig, a_key_given_twice_is_an_error_naming_both_lines) {
  std::string m = errorOf("train_batch_size: 8\nepochs: 2\nseed: 1\nepochs: 3\n");
  EXPECT_TRUE(has(m, "key epochs is given twice (lines 2 and 4)")) << m;
  m = errorOf(R"({"train_batch_size": 8,
 "optimizer": {"type": "Adam", "params": {"lr": 0.1, "lr": 0.2}}})");
  EXPECT_TRUE(has(m, "key optimizer.params.lr is given twice (lines 2 and 2)")) << m;
  // --set replaces a key; it never adds a second one.
  EXPECT_EQ(parseTrainConfig("train_batch_size: 8\nepochs: 2", {"epochs=5"}, 1).epochs, 5);
}

TEST(TrainConfig, non_finite_numbers_are_errors_where_a_number_is_meant) {
  std::string m = errorOf("train_batch_size: 8\noptimizer: {type: SGD, params: {lr: .inf}}");
  EXPECT_TRUE(has(m, "optimizer.params.lr: expected a finite number, got '.inf'")) << m;
  m = errorOf("train_batch_size: 8\ngradient_clipping: .nan");
  EXPECT_TRUE(has(m, "gradient_clipping: expected a finite number, got '.nan'")) << m;
  m = errorOf("train_batch_size: 8\noptimizer: {type: Adam, params: {betas: [0.9, .inf]}}");
  EXPECT_TRUE(has(m, "optimizer.params.betas[1]: expected a finite number")) << m;
}

TEST(TrainConfig, comm_timeout_seconds_is_a_positive_finite_number) {
  EXPECT_FALSE(parseTrainConfig("train_batch_size: 8", {}, 1).comm_timeout_seconds.has_value());
  EXPECT_EQ(parseTrainConfig("train_batch_size: 8\ncomm_timeout_seconds: 20", {}, 1).comm_timeout_seconds,
            20.0);
  for (const char* bad : {"0", "-5", ".inf", "1e9"}) {
    std::string m = errorOf(std::string("train_batch_size: 8\ncomm_timeout_seconds: ") + bad);
    EXPECT_TRUE(has(m, "comm_timeout_seconds")) << bad << ": " << m;
  }
}

// Seed 002's DeepSpeed config, its fp16 block exactly as the seed writes it.
TEST(TrainConfig, seed_002_fp16_block_is_accepted_with_deepspeeds_meanings) {
  const std::string json = R"({
    "train_batch_size": 32,
    "fp16": {
        "enabled": true,
        "auto_cast": false,
        "loss_scale": 0,
        "initial_scale_power": 16,
        "loss_scale_window": 1000,
        "hysteresis": 2,
        "consecutive_hysteresis": false,
        "min_loss_scale": 1
    }
})";
  TrainConfig c = parseTrainConfig(json, {}, 1);
  EXPECT_EQ(c.precision, parallel::Precision::fp16);
  ASSERT_TRUE(c.loss_scaler.has_value());
  EXPECT_EQ(c.loss_scaler->loss_scale, 0.0);  // dynamic
  EXPECT_EQ(c.loss_scaler->initial_scale_power, 16);
  EXPECT_EQ(c.loss_scaler->loss_scale_window, 1000);
  EXPECT_EQ(c.loss_scaler->hysteresis, 2);
  EXPECT_FALSE(c.loss_scaler->consecutive_hysteresis);
  EXPECT_EQ(c.loss_scaler->min_loss_scale, 1.0);
  EXPECT_FALSE(c.auto_cast);
}

TEST(TrainConfig, precision_sections_choose_the_precision) {
  EXPECT_EQ(parseTrainConfig("train_batch_size: 8", {}, 1).precision, parallel::Precision::fp32);
  TrainConfig bf = parseTrainConfig("train_batch_size: 8\nbf16: {enabled: true}", {}, 1);
  EXPECT_EQ(bf.precision, parallel::Precision::bf16);
  EXPECT_FALSE(bf.loss_scaler.has_value()) << "bf16 scales no loss";
  EXPECT_EQ(parseTrainConfig("train_batch_size: 8\nbfloat16: {enabled: true}", {}, 1).precision,
            parallel::Precision::bf16);
  // Beside bf16 the older name is ignored, as DeepSpeed's get_bfloat16_config ignores it.
  const TrainConfig both =
      parseTrainConfig("train_batch_size: 8\nbf16: {enabled: false}\nbfloat16: {enabled: true}", {}, 1);
  EXPECT_EQ(both.precision, parallel::Precision::fp32);
  ASSERT_EQ(both.notes.size(), 1u);
  EXPECT_TRUE(has(both.notes[0], "bfloat16 is ignored beside bf16"));
  EXPECT_EQ(
      parseTrainConfig(
          "train_batch_size: 8\nfp16: {enabled: true}\nbf16: {enabled: false}\nbfloat16: {enabled: true}", {},
          1)
          .precision,
      parallel::Precision::fp16);
  TrainConfig st =
      parseTrainConfig("train_batch_size: 8\nfp16: {enabled: true, loss_scale: 128, auto_cast: true}", {}, 1);
  EXPECT_EQ(st.precision, parallel::Precision::fp16);
  EXPECT_EQ(st.loss_scaler->loss_scale, 128.0);
  EXPECT_TRUE(st.auto_cast);
  // A disabled section changes nothing, as in DeepSpeed.
  TrainConfig off = parseTrainConfig("train_batch_size: 8\nfp16: {enabled: false, loss_scale: 128}", {}, 1);
  EXPECT_EQ(off.precision, parallel::Precision::fp32);
  EXPECT_FALSE(off.loss_scaler.has_value());
  EXPECT_EQ(parseTrainConfig("train_batch_size: 8", {"bf16.enabled=true"}, 1).precision,
            parallel::Precision::bf16);
}

TEST(TrainConfig, fp16_keys_mean_what_deepspeed_0_19_makes_of_them) {
  // DynamicLossScaler's default: an overflow at the floor stops the run (with ZeRO).
  EXPECT_TRUE(parseTrainConfig("train_batch_size: 8\nfp16: {enabled: true}", {}, 1)
                  .loss_scaler->raise_error_at_min_scale);
  // Its argument is no config key: DeepSpeed's config refuses it, and so does lockstep's.
  EXPECT_TRUE(has(errorOf("train_batch_size: 8\nfp16: {enabled: true, raise_error_at_min_scale: false}"),
                  "fp16.raise_error_at_min_scale is not a DeepSpeed config key"));
  // Without ZeRO DeepSpeed's FP16_Optimizer has no hysteresis: a note says the keys do nothing.
  auto notes = [](const TrainConfig& c) {
    std::string all;
    for (const auto& n : c.notes) all += n + "\n";
    return all;
  };
  const std::string stage0 = notes(parseTrainConfig(
      "train_batch_size: 8\nfp16: {enabled: true, hysteresis: 4, consecutive_hysteresis: true}", {}, 1));
  EXPECT_TRUE(has(stage0, "fp16.hysteresis has no effect without ZeRO")) << stage0;
  EXPECT_TRUE(has(stage0, "fp16.consecutive_hysteresis has no effect without ZeRO")) << stage0;
  const std::string stage1 = notes(parseTrainConfig(
      "train_batch_size: 8\nfp16: {enabled: true, hysteresis: 4}\nzero_optimization: {stage: 1}", {}, 1));
  EXPECT_FALSE(has(stage1, "hysteresis")) << stage1;
}

TEST(TrainConfig, deepspeed_0_19_defaults_and_rules) {
  // gradient_clipping omitted: DeepSpeed's default, 1.0; 0 turns it off.
  EXPECT_EQ(parseTrainConfig("train_batch_size: 8", {}, 1).gradient_clipping, 1.0);
  EXPECT_EQ(parseTrainConfig("train_batch_size: 8\ngradient_clipping: 0", {}, 1).gradient_clipping, 0.0);
  // ZeRO with an optimizer DeepSpeed has not tested with it needs zero_allow_untested_optimizer.
  const std::string sgd = "train_batch_size: 8\noptimizer: {type: SGD, params: {lr: 0.1}}\n";
  EXPECT_TRUE(has(errorOf(sgd + "zero_optimization: {stage: 1}"), "zero_allow_untested_optimizer: true"));
  EXPECT_EQ(
      parseTrainConfig(sgd + "zero_optimization: {stage: 2}\nzero_allow_untested_optimizer: true", {}, 1)
          .zero.stage,
      2);
  EXPECT_TRUE(has(errorOf(sgd + "zero_optimization: {stage: 1}\nzero_allow_untested_optimizer: false"),
                  "zero_allow_untested_optimizer"));
  EXPECT_EQ(parseTrainConfig(sgd, {}, 1).zero.stage, 0);  // no ZeRO: nothing to allow
  EXPECT_EQ(parseTrainConfig("train_batch_size: 8\nzero_optimization: {stage: 1}", {}, 1).zero.stage, 1);
}

TEST(TrainConfig, precision_section_errors_name_the_key) {
  EXPECT_TRUE(has(errorOf("train_batch_size: 8\nfp16: {enabled: true, bf16: {enabled: true}}"), "fp16.bf16"));
  EXPECT_TRUE(has(errorOf("train_batch_size: 8\nfp16: {enabled: true, loss_scale_windo: 10}"),
                  "did you mean fp16.loss_scale_window?"));
  EXPECT_TRUE(has(errorOf("train_batch_size: 8\nfp16: {enabled: true}\nbf16: {enabled: true}"), "both"));
  EXPECT_TRUE(has(errorOf("train_batch_size: 8\nfp16: {enabled: true, loss_scale_window: 0}"), "fp16: "));
  EXPECT_TRUE(has(errorOf("train_batch_size: 8\nfp16: {enabled: true, hysteresis: two}"), "fp16.hysteresis"));
  EXPECT_TRUE(has(errorOf("train_batch_size: 8\nfp16: {enabled: true, fp16_master_weights_and_grads: true}"),
                  "not supported"));
  EXPECT_TRUE(has(errorOf("train_batch_size: 8\nbf16: {enabled: true, loss_scale: 0}"), "bf16.loss_scale"));
}

TEST(TrainConfig, syntax_errors_name_the_file_line_and_column) {
  auto errorIn = [](const std::string& text, const std::string& source) -> std::string {
    try {
      parseTrainConfig(text, {}, 1, source);
    } catch (const ValueError& e) {
      return e.what();
    }
    return "(no error)";
  };
  // A missing comma: JSON's own parser reports it where it is (YAML used to misread such files).
  std::string m = errorIn("{\n  \"train_batch_size\": 8\n  \"epochs\": 2\n}\n", "ds.json");
  EXPECT_TRUE(has(m, "ds.json: line 3, column 10: JSON syntax error")) << m;
  // JSON's grammar, not YAML's: a trailing comma is an error in a .json file.
  m = errorIn("{\"train_batch_size\": 8,}", "ds.json");
  EXPECT_TRUE(has(m, "ds.json: line 1, column 24: JSON syntax error")) << m;
  m = errorIn("train_batch_size: 8\ndata: [1, 2\nepochs: 2\n", "c.yaml");
  EXPECT_TRUE(has(m, "c.yaml: line 3, column 7: YAML syntax error: end of sequence flow not found")) << m;
  // A key that is a list: an error naming the line (was yaml-cpp's "bad conversion", exit 1).
  m = errorIn("train_batch_size: 8\n? [1, 2]\n: 3\n", "k.yaml");
  EXPECT_TRUE(has(m, "k.yaml: line 2: a key of the config is a list or a mapping")) << m;
}

TEST(TrainConfig, synthetic_sizes_are_bounded_so_no_product_overflows) {
  std::string m = errorOf("train_batch_size: 8\ndata: {input_shape: [4294967296, 4294967296]}");
  EXPECT_TRUE(has(m, "data.input_shape")) << m;
  m = errorOf("train_batch_size: 8\ndata: {input_shape: [0]}");
  EXPECT_TRUE(has(m, "data.input_shape")) << m;
  m = errorOf("train_batch_size: 8\ndata: {size: -5}");
  EXPECT_TRUE(has(m, "data.size must be in [1, 2^31]")) << m;
}

TEST(TrainConfig, yaml_aliases_cannot_recurse_or_explode) {
  // Found by fuzz_config: an alias inside its own anchor made every walk of the document recurse
  // until the stack overflowed (old main: SIGSEGV); nested aliases expanded to billions of values.
  std::string m = errorOf("train_batch_size: 8\na: &x {b: 1, params: *x}\n");
  EXPECT_TRUE(has(m, "nested more than 64 levels deep")) << m;
  std::string text = "a: &a [x,x,x,x,x,x,x,x,x,x]\n";
  for (char c = 'b'; c <= 'h'; ++c) {
    text += std::string(1, c) + ": &" + c + " [";
    for (int i = 0; i < 10; ++i) text += std::string(i ? "," : "") + "*" + static_cast<char>(c - 1);
    text += "]\n";
  }
  m = errorOf(text);
  EXPECT_TRUE(has(m, "holds more than 100000 values")) << m;
}

TEST(TrainConfig, device_is_cpu_cuda_or_one_gpu_for_one_rank) {
  // (device, whether each rank takes cuda:LOCAL_RANK)
  auto device = [](const std::string& text, const std::vector<std::string>& overrides, int64_t world) {
    const TrainConfig c = parseTrainConfig(text, overrides, world);
    return std::pair{deviceName(c.device), c.device_per_local_rank};
  };
  EXPECT_EQ(device("train_batch_size: 8\n", {}, 1), std::pair(std::string("cpu"), false));
  EXPECT_EQ(device("train_batch_size: 8\ndevice: cuda\n", {}, 4), std::pair(std::string("cuda:0"), true));
  EXPECT_EQ(device("train_batch_size: 8\ndevice: cuda:1\n", {}, 1), std::pair(std::string("cuda:1"), false));
  EXPECT_EQ(device("train_batch_size: 8\n", {"device=cuda"}, 1), std::pair(std::string("cuda:0"), true));
  EXPECT_EQ(device("train_batch_size: 8\ndevice: cuda:0\n", {}, 1), std::pair(std::string("cuda:0"), false));
  std::string e = errorOf("train_batch_size: 8\ndevice: gpu\n");
  EXPECT_TRUE(has(e, "'gpu'") && has(e, "cuda:N")) << e;
  e = errorOf("train_batch_size: 8\ndevice: cuda:1\n", {}, 2);
  EXPECT_TRUE(has(e, "cuda:1") && has(e, "LOCAL_RANK")) << e;
}

TEST(TrainConfig, zero_on_a_gpu_takes_stages_1_to_3_zero_offload_and_parameter_offload_to_the_host) {
  const std::string base = "train_batch_size: 8\ndevice: cuda\n";
  EXPECT_EQ(parseTrainConfig(base + "zero_optimization: {stage: 2}\n", {}, 2).zero.stage, 2);
  EXPECT_EQ(parseTrainConfig(base + "zero_optimization: {stage: 1}\n", {}, 2).zero.stage, 1);
  // ZeRO-Offload: the optimizer on the host, said once; the CPU run's "nothing is moved" is not said.
  TrainConfig c = parseTrainConfig(
      base + "zero_optimization: {stage: 2, offload_optimizer: {device: cpu, pin_memory: true}}\n", {}, 2);
  EXPECT_TRUE(c.zero.options.offload_optimizer_cpu);
  EXPECT_TRUE(c.zero.options.offload_optimizer_pin_memory);
  ASSERT_EQ(c.zero.notes.size(), 1u);
  EXPECT_TRUE(has(c.zero.notes[0], "ZeRO-Offload") && has(c.zero.notes[0], "pinned")) << c.zero.notes[0];
  // On the CPU the same key moves nothing (a note), and the optimizer is not told to copy.
  c = parseTrainConfig(
      "train_batch_size: 8\nzero_optimization: {stage: 2, offload_optimizer: {device: cpu}}\n", {}, 2);
  EXPECT_FALSE(c.zero.options.offload_optimizer_cpu);
  ASSERT_EQ(c.zero.notes.size(), 1u);
  EXPECT_TRUE(has(c.zero.notes[0], "nothing is moved")) << c.zero.notes[0];
  EXPECT_EQ(parseTrainConfig(base + "zero_optimization: {stage: 3}\n", {}, 2).zero.stage, 3);
  // Stage 3: ZeRO-Offload, and the parameters' partition on the host (ZeRO-3 Offload), each said.
  c = parseTrainConfig(base +
                           "zero_optimization: {stage: 3, offload_optimizer: {device: cpu}, offload_param: "
                           "{device: cpu, pin_memory: true}}\n",
                       {}, 2);
  EXPECT_TRUE(c.zero.options.offload_optimizer_cpu);
  EXPECT_TRUE(c.zero.options.offload_param_cpu);
  EXPECT_TRUE(c.zero.options.offload_param_pin_memory);
  ASSERT_EQ(c.zero.notes.size(), 2u);
  EXPECT_TRUE(has(c.zero.notes[1], "offload_param.device cpu") && has(c.zero.notes[1], "pinned"))
      << c.zero.notes[1];
  EXPECT_FALSE(has(c.zero.notes[0] + c.zero.notes[1], "nothing is moved"));
  c = parseTrainConfig(base + "zero_optimization: {stage: 3, offload_optimizer: {device: cpu}}\n", {}, 2);
  EXPECT_TRUE(c.zero.options.offload_optimizer_cpu);
  EXPECT_FALSE(c.zero.options.offload_param_cpu);
  // The parameters on the host need the optimizer there (it steps them), before any rank starts.
  std::string e = errorOf(base + "zero_optimization: {stage: 3, offload_param: {device: cpu}}\n", {}, 2);
  EXPECT_TRUE(has(e, "offload_param.device cpu needs offload_optimizer.device cpu")) << e;
  // NVMe on a GPU: ZeRO-Infinity's configuration only (the pieces pass through host memory).
  for (const char* z : {"{stage: 2, offload_optimizer: {device: nvme, nvme_path: /tmp}}",
                        "{stage: 3, offload_optimizer: {device: nvme, nvme_path: /tmp}}"}) {
    e = errorOf(base + "zero_optimization: " + z + "\n", {}, 2);
    EXPECT_TRUE(has(e, "offload_optimizer with device nvme on a GPU takes ZeRO-Infinity's configuration"))
        << e;
  }
  c = parseTrainConfig(
      base +
          "zero_optimization: {stage: 3, offload_optimizer: {device: nvme, nvme_path: /tmp}, "
          "offload_param: {device: nvme, nvme_path: /tmp}}\n",
      {}, 2);
  EXPECT_EQ(c.zero.options.offload_param_nvme_path, "/tmp");
  EXPECT_EQ(c.zero.options.offload_optimizer.nvme_path, "/tmp");
  // On the CPU the parameters' key moves nothing either (a note), and the optimizer is not told to.
  c = parseTrainConfig("train_batch_size: 8\nzero_optimization: {stage: 3, offload_param: {device: cpu}}\n",
                       {}, 2);
  EXPECT_FALSE(c.zero.options.offload_param_cpu);
  // The same keys on the CPU: accepted, as before.
  EXPECT_EQ(parseTrainConfig(
                "train_batch_size: 8\nzero_optimization: {stage: 3, offload_param: {device: cpu}}\n", {}, 2)
                .zero.stage,
            3);
}

TEST(TrainConfig, bf16_and_fp16_with_zero_keep_16_bit_parameters_and_f32_master_weights) {
  // DeepSpeed's layout: 16-bit parameters with f32 master weights at every ZeRO stage; DDP, a
  // pipeline's ZeRO-1 and the NVMe offloads keep f32 parameters under autocast (a note says so).
  auto parse = [](const std::string& text, int64_t world = 2) {
    return parseTrainConfig("train_batch_size: 8\n" + text, {}, world);
  };
  for (int stage : {1, 2, 3}) {
    const std::string z = "zero_optimization: {stage: " + std::to_string(stage) + "}\n";
    TrainConfig c = parse("bf16: {enabled: true}\n" + z);
    EXPECT_EQ(c.zero.options.param_dtype, DType::bf16) << stage;
    ASSERT_FALSE(c.zero.notes.empty());
    EXPECT_TRUE(has(c.zero.notes.back(), "f32 master weights and optimizer states")) << c.zero.notes.back();
    EXPECT_EQ(parse("fp16: {enabled: true}\n" + z).zero.options.param_dtype, DType::f16) << stage;
    EXPECT_FALSE(parse(z).zero.options.param_dtype.has_value()) << stage;
  }
  EXPECT_FALSE(parse("bf16: {enabled: true}\n").zero.options.param_dtype.has_value());
  TrainConfig c = parse(
      "bf16: {enabled: true}\nzero_optimization: {stage: 1, offload_optimizer: {device: nvme, "
      "nvme_path: /tmp}}\n");
  EXPECT_FALSE(c.zero.options.param_dtype.has_value());
  ASSERT_FALSE(c.zero.notes.empty());
  EXPECT_TRUE(has(c.zero.notes.back(), "bf16 with zero_optimization.stage 1 and NVMe offload"))
      << c.zero.notes.back();
  c = parseTrainConfig(
      "model: {name: gpt}\ndata: {dataset: text}\ntrain_micro_batch_size_per_gpu: 4\n"
      "gradient_accumulation_steps: 8\nbf16: {enabled: true}\nzero_optimization: {stage: 1}\npipeline: "
      "{stages: 2}\n",
      {}, 4);
  EXPECT_FALSE(c.zero.options.param_dtype.has_value());
  ASSERT_FALSE(c.zero.notes.empty());
  EXPECT_TRUE(has(c.zero.notes.back(), "in a pipeline")) << c.zero.notes.back();
  // DeepSpeed's keys asking for f32 accumulation, or (fp16) for dividing before an f16 sum: f32
  // gradients, so f32 parameters.
  for (const char* keys : {"bf16: {enabled: true}\ndata_types: {grad_accum_dtype: fp32}\n",
                           "fp16: {enabled: true}\nprescale_gradients: true\n",
                           "fp16: {enabled: true}\ngradient_predivide_factor: 2.0\n"}) {
    c = parse(std::string(keys) + "zero_optimization: {stage: 2}\n");
    EXPECT_FALSE(c.zero.options.param_dtype.has_value()) << keys;
    ASSERT_FALSE(c.zero.notes.empty()) << keys;
    EXPECT_TRUE(has(c.zero.notes.back(), "stay f32")) << c.zero.notes.back();
  }
  EXPECT_EQ(parse("bf16: {enabled: true}\nprescale_gradients: true\nzero_optimization: {stage: 2}\n")
                .zero.options.param_dtype,
            DType::bf16);  // bf16 sums have f32's range
  EXPECT_EQ(parse("fp16: {enabled: true}\nprescale_gradients: false\ngradient_predivide_factor: 1.0\n"
                  "zero_optimization: {stage: 2}\n")
                .zero.options.param_dtype,
            DType::f16);
}

TEST(TrainConfig, bf16_check_grad_overflow_skips_steps_at_zero_stages_1_and_2_as_deepspeed) {
  // DeepSpeed's bf16.check_grad_overflow (default true) acts in its ZeRO stage 1 and 2 optimizer;
  // stage 3, no ZeRO, and torch_autocast alone check nothing there, nor here.
  auto skips = [](const std::string& text) {
    const TrainConfig c = parseTrainConfig("train_batch_size: 8\n" + text, {}, 2);
    return engineOptions(c, 10, Device::cpu()).skip_nonfinite_steps;
  };
  for (int stage : {0, 1, 2, 3}) {
    const std::string zero = "zero_optimization: {stage: " + std::to_string(stage) + "}\n";
    EXPECT_EQ(skips("bf16: {enabled: true}\n" + zero), stage == 1 || stage == 2) << stage;
    EXPECT_FALSE(skips("bf16: {enabled: true, check_grad_overflow: false}\n" + zero)) << stage;
    EXPECT_EQ(skips("bf16: {enabled: true, check_grad_overflow: true}\n" + zero), stage == 1 || stage == 2);
    EXPECT_FALSE(skips("torch_autocast: {enabled: true, dtype: bfloat16}\n" + zero)) << stage;
    EXPECT_FALSE(skips(zero)) << stage;
  }
  EXPECT_TRUE(has(errorOf("train_batch_size: 8\nbf16: {enabled: true, check_grad_overflow: maybe}\n", {}, 2),
                  "check_grad_overflow"));
}

TEST(TrainConfig, bf16_master_weights_and_torch_autocast_are_deepspeeds) {
  auto parse = [](const std::string& text, int64_t world = 2) {
    return parseTrainConfig("train_batch_size: 8\n" + text, {}, world);
  };
  auto err = [](const std::string& text) { return errorOf("train_batch_size: 8\n" + text, {}, 2); };
  const std::string both =
      "bf16: {enabled: true, bf16_master_weights_and_grads: true, bf16_optimizer_states: true}\n";
  for (int stage : {1, 2, 3}) {
    const TrainConfig c = parse(both + "zero_optimization: {stage: " + std::to_string(stage) + "}\n");
    EXPECT_EQ(c.zero.options.param_dtype, DType::bf16) << stage;
    EXPECT_TRUE(c.zero.options.master_weights_in_param_dtype) << stage;
    ASSERT_FALSE(c.zero.notes.empty());
    EXPECT_TRUE(has(c.zero.notes.back(), "the parameters their own master weights")) << c.zero.notes.back();
  }
  // A disabled section's keys are ignored, as DeepSpeed's other disabled sections' are.
  EXPECT_FALSE(
      parse("bf16: {enabled: false, bf16_master_weights_and_grads: true, bf16_optimizer_states: true}\n"
            "zero_optimization: {stage: 2}\n")
          .zero.options.master_weights_in_param_dtype);
  // DeepSpeed's rules, and what lockstep lacks, each named.
  EXPECT_TRUE(has(err(both), "needs zero_optimization.stage 1, 2 or 3"));
  EXPECT_TRUE(has(err("bf16: {enabled: true, bf16_optimizer_states: true}\nzero_optimization: {stage: 2}\n"),
                  "bf16.bf16_optimizer_states needs bf16.bf16_master_weights_and_grads"));
  // Without bf16 states: DeepSpeedCPUAdam's f32 ones, on the host only (ZeRO-Offload, Adam).
  const std::string alone = "bf16: {enabled: true, bf16_master_weights_and_grads: true}\n";
  EXPECT_TRUE(has(err(alone + "zero_optimization: {stage: 2}\n"), "DeepSpeed allows only on the host"));
  EXPECT_TRUE(has(err(alone + "optimizer: {type: SGD, params: {lr: 0.1}}\nzero_optimization: {stage: 2, "
                              "offload_optimizer: {device: cpu}}\n"),
                  "with Adam or AdamW"));
  const TrainConfig offloaded =
      parse(alone + "zero_optimization: {stage: 2, offload_optimizer: {device: cpu}}\n");
  EXPECT_TRUE(offloaded.zero.options.master_weights_in_param_dtype);
  EXPECT_EQ(std::get<bool>(offloaded.optimizer.params.at("fp32_optimizer_states")), true);
  EXPECT_TRUE(has(offloaded.zero.notes.back(), "the optimizer states are f32"))
      << offloaded.zero.notes.back();
  EXPECT_EQ(std::get<bool>(parse(alone +
                                 "optimizer: {type: AdamW, params: {lr: 0.1, fp32_optimizer_states: false}}\n"
                                 "zero_optimization: {stage: 2, offload_optimizer: {device: cpu}}\n")
                               .optimizer.params.at("fp32_optimizer_states")),
            false);
  // bf16 states override fp32_optimizer_states, as in DeepSpeed.
  const TrainConfig states = parse(both +
                                   "optimizer: {type: Adam, params: {lr: 0.1, fp32_optimizer_states: true}}\n"
                                   "zero_optimization: {stage: 2}\n");
  EXPECT_EQ(std::get<bool>(states.optimizer.params.at("fp32_optimizer_states")), false);
  EXPECT_TRUE(has(states.zero.notes.back(), "the optimizer states are bf16")) << states.zero.notes.back();
  EXPECT_TRUE(
      has(err(both + "zero_optimization: {stage: 2, offload_optimizer: {device: nvme, nvme_path: /tmp}}\n"),
          "with NVMe offload is not supported yet"));
  EXPECT_TRUE(has(err(both + "data_types: {grad_accum_dtype: fp32}\nzero_optimization: {stage: 2}\n"),
                  "grad_accum_dtype fp32"));

  // torch_autocast in bfloat16 alone: bf16 autocast with f32 parameters at every stage.
  for (const char* dtype : {"bfloat16", "torch.bfloat16", "bf16"}) {
    const TrainConfig c = parse(std::string("torch_autocast: {enabled: true, dtype: ") + dtype +
                                "}\nzero_optimization: {stage: 3}\n");
    EXPECT_EQ(c.precision, parallel::Precision::bf16) << dtype;
    EXPECT_TRUE(c.torch_autocast);
    EXPECT_FALSE(c.zero.options.param_dtype.has_value()) << dtype;
    ASSERT_FALSE(c.zero.notes.empty());
    EXPECT_TRUE(has(c.zero.notes.back(), "stay f32")) << c.zero.notes.back();
  }
  EXPECT_EQ(parse("torch_autocast: {enabled: true, dtype: bfloat16}\n").precision, parallel::Precision::bf16);
  // Beside bf16 or fp16: their precision, whose forward is autocast already.
  TrainConfig c = parse(
      "bf16: {enabled: true}\ntorch_autocast: {enabled: true, dtype: torch.bfloat16}\n"
      "zero_optimization: {stage: 2}\n");
  EXPECT_EQ(c.zero.options.param_dtype, DType::bf16);
  EXPECT_FALSE(c.torch_autocast);
  EXPECT_EQ(parse("fp16: {enabled: true}\ntorch_autocast: {enabled: true, dtype: half}\n").precision,
            parallel::Precision::fp16);
  // Off, it is ignored whatever else it holds.
  EXPECT_EQ(parse("torch_autocast: {enabled: false, dtype: nonsense}\n").precision,
            parallel::Precision::fp32);
  EXPECT_TRUE(has(err("torch_autocast: {enabled: true}\n"), "torch_autocast.dtype: name it"));
  EXPECT_TRUE(has(err("torch_autocast: {enabled: true, dtype: float64}\n"), "got 'float64'"));
  EXPECT_TRUE(has(err("bf16: {enabled: true}\ntorch_autocast: {enabled: true, dtype: float16}\n"),
                  "ask for two precisions"));
  EXPECT_TRUE(has(err("torch_autocast: {enabled: true, dtype: float16}\n"), "GradScaler"));
  EXPECT_TRUE(has(err("torch_autocast: {enabled: true, dtype: bfloat16, lower_precision_safe_modules: "
                      "[torch.nn.Linear]}\n"),
                  "torch_autocast.lower_precision_safe_modules is not supported yet"));
  EXPECT_TRUE(has(err("torch_autocast: {enabled: true, dtype: bfloat16, cast: 1}\n"), "unknown key"));
}

TEST(TrainConfig, pipeline_section_counts_replicas_in_the_batch_and_leaves_the_identity) {
  const std::string base =
      "model: {name: gpt}\ndata: {dataset: text}\ntrain_micro_batch_size_per_gpu: "
      "4\ngradient_accumulation_steps: 8\n";
  TrainConfig c = parseTrainConfig(base +
                                       "pipeline: {stages: 2, partition_method: 'type:Block', schedule: "
                                       "gpipe, activation_checkpoint_interval: 1}\n",
                                   {}, 4);
  EXPECT_EQ(c.pipeline.stages, 2);
  EXPECT_EQ(c.pipeline.partition_method, "type:Block");
  EXPECT_EQ(c.pipeline.schedule, "gpipe");
  EXPECT_EQ(c.pipeline.activation_checkpoint_interval, 1);
  // train_batch_size = micro * micro-batches * data-parallel size (4 ranks / 2 stages).
  EXPECT_EQ(c.batch.train_batch_size, 4 * 8 * 2);
  // How the ranks split the work is not what is trained: a checkpoint resumes on any stage count.
  EXPECT_EQ(c.identity_hash, parseTrainConfig(base, {}, 4).identity_hash);
  // DeepSpeed's own keys at values without effect here: accepted, with a note.
  c = parseTrainConfig(
      base + "pipeline: {stages: 4, partition: best, seed_layers: false, pipe_partitioned: true}\n", {}, 4);
  EXPECT_EQ(c.batch.train_batch_size, 32);
  ASSERT_EQ(c.notes.size(), 2u);
  EXPECT_NE(c.notes[0].find("pipeline.partition: best"), std::string::npos) << c.notes[0];
  c = parseTrainConfig(base + "pipeline: {stages: 2, boundaries: [0, 3, 6]}\n", {}, 2);
  EXPECT_EQ(c.pipeline.boundaries, (std::vector<int64_t>{0, 3, 6}));
  try {
    parseTrainConfig(base + "train_batch_size: 32\npipeline: {stages: 2}\n", {}, 4);
    FAIL() << "32 is not 4 x 8 x 2 replicas";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("data-parallel size (world size 4 / pipeline.stages 2) 2"),
              std::string::npos)
        << e.what();
  }
}

// A GPU rank takes its share of the host's cores when the launcher, not the user, gave it one thread
// (torchrun's OMP_NUM_THREADS=1 for ranks sharing a host): its host work (ZeRO-Offload's step) needs
// them. A CPU rank, a count set since (a script's export), another local world's mark, or no mark
// keeps its count (0).
TEST(TrainSetup, gpu_ranks_take_their_share_of_the_cores_when_the_launcher_chose_one_thread) {
  struct SavedEnv {  // the variables this test sets, as they were
    std::vector<std::pair<std::string, std::optional<std::string>>> saved;
    SavedEnv() {
      for (const char* k : {"LOCKSTEP_NUM_THREADS", "OMP_NUM_THREADS", launch::kDefaultedOmpThreads}) {
        const char* v = std::getenv(k);
        saved.emplace_back(k, v ? std::optional<std::string>(v) : std::nullopt);
      }
    }
    ~SavedEnv() {
      for (const auto& [k, v] : saved) {
        if (v) {
          ::setenv(k.c_str(), v->c_str(), 1);
        } else {
          ::unsetenv(k.c_str());
        }
      }
    }
  } saved;
  ::unsetenv("LOCKSTEP_NUM_THREADS");
  ::setenv("OMP_NUM_THREADS", "1", 1);
  ::setenv(launch::kDefaultedOmpThreads, "2", 1);
  EXPECT_EQ(train::gpuRankHostThreads(Device::cuda(0), 16, 2), 8);
  EXPECT_EQ(train::gpuRankHostThreads(Device::cuda(0), 3, 2), 1);
  EXPECT_EQ(train::gpuRankHostThreads(Device::cpu(), 16, 2), 0);
  EXPECT_EQ(train::gpuRankHostThreads(Device::cuda(0), 16, 4), 0);  // marked for another local world
  ::setenv(launch::kDefaultedOmpThreads, "3", 1);
  EXPECT_EQ(train::gpuRankHostThreads(Device::cuda(1), 16, 3), 5);
  ::setenv("OMP_NUM_THREADS", "8", 1);  // exported after the launcher
  EXPECT_EQ(train::gpuRankHostThreads(Device::cuda(1), 16, 3), 0);
  ::setenv("OMP_NUM_THREADS", "1", 1);
  ::setenv("LOCKSTEP_NUM_THREADS", "2", 1);
  EXPECT_EQ(train::gpuRankHostThreads(Device::cuda(1), 16, 3), 0);
  ::unsetenv("LOCKSTEP_NUM_THREADS");
  ::unsetenv(launch::kDefaultedOmpThreads);
  EXPECT_EQ(train::gpuRankHostThreads(Device::cuda(1), 16, 3), 0);
}

// data.root's leading ~ is the home directory, as torchvision's datasets expanduser their root
// (Paddle's CIFAR-10 lies in ~/.cache/paddle/dataset/cifar).
TEST(TrainConfig, data_root_starting_with_a_tilde_is_under_home) {
  const char* old = std::getenv("HOME");
  const std::string saved = old != nullptr ? old : "";
  ::setenv("HOME", "/home/someone", 1);
  EXPECT_EQ(
      parseTrainConfig("train_batch_size: 8\ndata: {dataset: cifar10, root: ~/.cache/cifar.tar.gz}", {}, 1)
          .data.root,
      "/home/someone/.cache/cifar.tar.gz");
  EXPECT_EQ(
      parseTrainConfig("train_batch_size: 8\ndata: {dataset: cifar10, root: /data/~x}", {}, 1).data.root,
      "/data/~x");
  ::unsetenv("HOME");
  EXPECT_TRUE(has(errorOf("train_batch_size: 8\ndata: {dataset: cifar10, root: ~/c}"), "HOME is not set"));
  if (old != nullptr) ::setenv("HOME", saved.c_str(), 1);
}
