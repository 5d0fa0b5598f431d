// Inputs a user can get wrong, run on the built `lockstep` binary: each is an exit-2 error naming
// the key and what to do, before any step (or, for a run's own files, without losing any).
#include <gtest/gtest.h>

#include "train/train_cli.h"

using namespace lockstep::test;

namespace {
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

// A batch size whose product with the world size wraps around int64 (SIGFPE before: 2^62 x 4 ranks
// was 0, then a division by zero).
TEST_F(TrainCli, batch_sizes_past_int64_are_an_error_not_a_crash) {
  const std::string cfg = writeConfig("c.yaml", kSynthetic);
  Result r = run(cfg + " --output-dir " + dir_ + "/o --nproc-per-node 4 --set train_batch_size=8" +
                 " --set train_micro_batch_size_per_gpu=4611686018427387904");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "2^63 - 1")) << r.output;
}

// checkpoint.dir that cannot be written: refused before training, naming the key.
TEST_F(TrainCli, an_unwritable_checkpoint_dir_is_refused_before_training) {
  std::ofstream(dir_ + "/afile") << "x";
  Result r = run(writeConfig("c.yaml", kSynthetic) + " --output-dir " + dir_ +
                 "/o --set checkpoint.dir=" + dir_ + "/afile/ck");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "cannot create checkpoint.dir " + dir_ + "/afile/ck")) << r.output;
  EXPECT_FALSE(has(r.output, "loss")) << "refused before any step:\n" << r.output;
}

// Counts below their range, and quoted scalars where a number or a boolean is meant (a string, as in
// JSON: yaml-cpp read "yes" as true, and DeepSpeed would take "false" as true).
TEST_F(TrainCli, out_of_range_checkpoint_counts_and_quoted_numbers_and_booleans_are_refused) {
  const std::string cfg = writeConfig("c.yaml", kSynthetic);
  Result every = run(cfg + " --output-dir " + dir_ + "/o --set checkpoint.every_steps=-1");
  EXPECT_EQ(every.code, 2) << every.output;
  EXPECT_TRUE(has(every.output, "checkpoint.every_steps must be >= 0")) << every.output;
  Result keep = run(cfg + " --output-dir " + dir_ + "/o --set checkpoint.keep_last=-1");
  EXPECT_EQ(keep.code, 2) << keep.output;
  EXPECT_TRUE(has(keep.output, "checkpoint.keep_last must be >= 0")) << keep.output;
  Result seed = run(cfg + " --output-dir " + dir_ + "/o --set seed=-1");
  EXPECT_EQ(seed.code, 2) << seed.output;
  EXPECT_TRUE(has(seed.output, "seed: expected a non-negative integer, got '-1'")) << seed.output;
  Result quoted = run(writeConfig("q.json", R"({"model": {"name": "mlp", "hidden": [8]},
    "data": {"dataset": "synthetic", "size": 96, "test_size": 32, "input_shape": [6], "num_classes": 3},
    "train_micro_batch_size_per_gpu": 8, "max_steps": 2, "bf16": {"enabled": "yes"}})") +
                      " --output-dir " + dir_ + "/o");
  EXPECT_EQ(quoted.code, 2) << quoted.output;
  EXPECT_TRUE(has(quoted.output, "bf16.enabled: expected a boolean, got the string \"yes\""))
      << quoted.output;
  Result stage = run(writeConfig("s.json", R"({"model": {"name": "mlp", "hidden": [8]},
    "data": {"dataset": "synthetic", "size": 96, "test_size": 32, "input_shape": [6], "num_classes": 3},
    "train_micro_batch_size_per_gpu": 8, "max_steps": 2, "zero_optimization": {"stage": "1"}})") +
                     " --output-dir " + dir_ + "/o");
  EXPECT_EQ(stage.code, 2) << stage.output;
  EXPECT_TRUE(
      has(stage.output, "zero_optimization.stage: expected a whole number >= 0, got the string \"1\""))
      << stage.output;
  Result dot = run(cfg + " --output-dir " + dir_ + "/o --set max_steps.=3");
  EXPECT_EQ(dot.code, 2) << dot.output;
  EXPECT_TRUE(has(dot.output, "empty key component")) << dot.output;
}

// A micro-batch larger than the whole training set: refused (it trained every step on a partial batch
// while reporting the configured one).
TEST_F(TrainCli, a_micro_batch_past_the_training_set_is_refused) {
  Result r = run(writeConfig("c.yaml", kSynthetic) + " --output-dir " + dir_ +
                 "/o --set train_micro_batch_size_per_gpu=1000 --set gradient_accumulation_steps=1");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(
      r.output,
      "the training set (96 samples) is smaller than one micro-batch (train_micro_batch_size_per_gpu 1000)"))
      << r.output;
}

// `model: mlp` given a key of the mapping form by --set keeps its name.
TEST_F(TrainCli, set_on_a_model_named_by_a_string_keeps_the_name) {
  std::string text = kSynthetic;
  text.replace(text.find("model: {name: mlp, hidden: [8]}"),
               std::string("model: {name: mlp, hidden: [8]}").size(), "model: mlp");
  Result r = run(writeConfig("c.yaml", text) + " --output-dir " + dir_ +
                 "/o --set model.hidden=[4] --set max_steps=2");
  EXPECT_EQ(r.code, 0) << r.output;
  Result bad = run(writeConfig("d.yaml", text) + " --output-dir " + dir_ + "/o --set max_steps.x=2");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_TRUE(has(bad.output, "max_steps is '20' in the config, not a mapping of keys")) << bad.output;
}

// metrics.csv cut short mid-row (a full disk, a kill): a resumed run drops the unfinished row and
// appends whole rows.
TEST_F(TrainCli, a_resumed_run_cuts_an_unfinished_metrics_row) {
  const std::string cfg = writeConfig("c.yaml", kSynthetic);
  Result first = run(cfg + " --output-dir " + dir_ + "/o --set max_steps=8");
  ASSERT_EQ(first.code, 0) << first.output;
  { std::ofstream(dir_ + "/o/metrics.csv", std::ios::app) << "3,"; }
  Result again = run(cfg + " --output-dir " + dir_ + "/o --resume --set max_steps=12");
  ASSERT_EQ(again.code, 0) << again.output;
  EXPECT_TRUE(has(again.output, "metrics.csv ended in an unfinished row (2 bytes), cut off")) << again.output;
  std::ifstream in(dir_ + "/o/metrics.csv");
  int lines = 0;
  for (std::string line; std::getline(in, line); ++lines) {
    EXPECT_EQ(std::count(line.begin(), line.end(), ','), 4) << "line " << lines << ": " << line;
  }
  EXPECT_GT(lines, 3);
}
