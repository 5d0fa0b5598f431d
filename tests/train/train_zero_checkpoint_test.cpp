// Partitioned ZeRO checkpoints through `lockstep train`, as a user runs it: every rank writes its
// own partition file, a checkpoint resumes on another world size and stage (resharded), a
// truncated or missing rank file is named and the run falls back to the previous checkpoint, and
// `lockstep checkpoint consolidate` puts the model back together.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "lockstep/train/checkpoint/safetensors.h"
#include "train/train_cli.h"

using namespace lockstep::test;

namespace {

// kSynthetic's model and data (mlp 6 -> 8 -> 3: 83 parameters, an odd count) with 24 samples per
// step whatever the world size: 4 steps an epoch, and every world size's step k covers the same
// samples, so runs of different world sizes train alike (up to summation order).
constexpr const char* kModel = R"(
model: {name: mlp, hidden: [8]}
data: {dataset: synthetic, size: 96, test_size: 32, input_shape: [6], num_classes: 3}
gradient_accumulation_steps: 2
optimizer: {type: Adam, params: {lr: 0.01}}
epochs: 4
steps_per_print: 3
checkpoint: {every_steps: 3, keep_last: 0}
)";

// --set for `world` ranks: 24 samples a step.
std::string world(int n) {
  return " --nproc-per-node " + std::to_string(n) +
         " --set train_micro_batch_size_per_gpu=" + std::to_string(12 / n);
}

}  // namespace

TEST_F(TrainCli, zero_checkpoint_is_per_rank_and_resumes_on_any_world_size_and_stage) {
  std::string cfg = writeConfig("c.yaml", kModel);
  const std::string z3 = " --set zero_optimization.stage=3";
  // The uninterrupted run: stage 3 on 2 ranks, 8 steps.
  Result s = run(cfg + world(2) + z3 + " --output-dir " + dir_ + "/s --set max_steps=8");
  ASSERT_EQ(s.code, 0) << s.output;
  // 3 steps (mid-epoch) on 2 ranks with small buckets (two pieces per rank), checkpointed at step 3.
  Result w = run(cfg + world(2) + z3 + " --set zero_optimization.reduce_bucket_size=40 --output-dir " + dir_ +
                 "/w --set max_steps=3");
  ASSERT_EQ(w.code, 0) << w.output;
  const std::string ckpt = dir_ + "/w/checkpoints/ckpt-3";
  for (const char* f : {"zero/rank-00000-of-00002.safetensors", "zero/rank-00001-of-00002.safetensors",
                        "model_buffers.safetensors", "state.json", "config.json", "manifest.json"})
    EXPECT_TRUE(fs::exists(ckpt + "/" + f)) << f;
  EXPECT_FALSE(fs::exists(ckpt + "/optimizer.safetensors"));
  EXPECT_FALSE(fs::exists(ckpt + "/model.safetensors"));
  auto manifest = nlohmann::json::parse(readFile(ckpt + "/manifest.json"))["manifest"];
  EXPECT_EQ(manifest["zero"]["world_size"], 2) << manifest.dump();
  EXPECT_EQ(manifest["zero"]["stage"], 3) << manifest.dump();
  EXPECT_TRUE(manifest["files"].contains("zero/rank-00001-of-00002.safetensors")) << manifest.dump();
  // Each rank's file holds its elements only: 83 parameter elements split 42 + 41, each with
  // Adam's two buffers.
  int64_t elements = 0;
  for (const char* f : {"/zero/rank-00000-of-00002.safetensors", "/zero/rank-00001-of-00002.safetensors"}) {
    auto part = lockstep::train::loadSafetensors(ckpt + f);
    EXPECT_EQ(part.metadata["format"], "lockstep-zero-partition-v1");
    for (const auto& [name, t] : part.tensors)
      if (name.find('/') == std::string::npos) elements += t.numel();
  }
  EXPECT_EQ(elements, 83);

  // Resharded resumes, each to step 8, against the uninterrupted run.
  struct Resume {
    const char* name;
    std::string args;
  };
  const Resume resumes[] = {{"w3z3", world(3) + z3},
                            {"w1ddp", world(1) + " --set zero_optimization.stage=0"},
                            {"w2ddp", world(2) + " --set zero_optimization.stage=0"}};
  for (const Resume& r : resumes) {
    const std::string out = dir_ + "/" + r.name;
    Result res = run(cfg + r.args + " --output-dir " + out + " --set max_steps=8 --resume-from " + ckpt);
    ASSERT_EQ(res.code, 0) << r.name << "\n" << res.output;
    EXPECT_NE(res.output.find("(step 3)"), std::string::npos) << r.name << "\n" << res.output;
    EXPECT_LE(safetensorsRelDiff(out + "/model.safetensors", dir_ + "/s/model.safetensors"), 1e-6) << r.name;
  }
  // The DDP run's checkpoint goes back into ZeRO stage 3 on 3 ranks (whole tensors, resharded).
  Result back = run(cfg + world(3) + z3 + " --output-dir " + dir_ + "/back --set max_steps=8 --resume-from " +
                    dir_ + "/w1ddp/checkpoints/ckpt-6");
  ASSERT_EQ(back.code, 0) << back.output;
  EXPECT_LE(safetensorsRelDiff(dir_ + "/back/model.safetensors", dir_ + "/s/model.safetensors"), 1e-6);

  // zero_to_fp32: the partitioned checkpoint of step 8 is the model the run ended with, bitwise.
  Result c =
      runLockstep(dir_, "checkpoint consolidate " + dir_ + "/s/checkpoints " + dir_ + "/w.safetensors");
  ASSERT_EQ(c.code, 0) << c.output;
  EXPECT_NE(c.output.find("(step 8)"), std::string::npos) << c.output;
  EXPECT_EQ(safetensorsRelDiff(dir_ + "/w.safetensors", dir_ + "/s/model.safetensors"), 0.0);
  EXPECT_EQ(safetensorsRelDiff(dir_ + "/s/model.safetensors", dir_ + "/w.safetensors"),
            0.0);  // no extra tensors
}

TEST_F(TrainCli, zero_stage2_checkpoint_resumes_as_stage1) {
  std::string cfg = writeConfig("c.yaml", kModel);
  Result s =
      run(cfg + world(2) + " --set zero_optimization.stage=2 --output-dir " + dir_ + "/s --set max_steps=8");
  ASSERT_EQ(s.code, 0) << s.output;
  ASSERT_EQ(
      run(cfg + world(2) + " --set zero_optimization.stage=2 --output-dir " + dir_ + "/r --set max_steps=3")
          .code,
      0);
  // Same world size and stage: bitwise.
  Result same = run(cfg + world(2) + " --set zero_optimization.stage=2 --output-dir " + dir_ +
                    "/r --set max_steps=8 --resume");
  ASSERT_EQ(same.code, 0) << same.output;
  EXPECT_EQ(readFile(dir_ + "/r/model.safetensors"), readFile(dir_ + "/s/model.safetensors"));
  Result stage1 = run(cfg + world(2) + " --set zero_optimization.stage=1 --output-dir " + dir_ +
                      "/x --set max_steps=8 --resume-from " + dir_ + "/r/checkpoints/ckpt-3");
  ASSERT_EQ(stage1.code, 0) << stage1.output;
  EXPECT_NE(stage1.output.find("(step 3)"), std::string::npos) << stage1.output;
  EXPECT_LE(safetensorsRelDiff(dir_ + "/x/model.safetensors", dir_ + "/s/model.safetensors"), 1e-6);
}

TEST_F(TrainCli, zero_checkpoint_with_a_damaged_rank_file_is_named_and_skipped) {
  std::string cfg = writeConfig("c.yaml", kModel);
  const std::string args = cfg + world(2) + " --set zero_optimization.stage=3 --output-dir " + dir_ + "/r";
  ASSERT_EQ(run(args + " --set max_steps=6").code, 0);  // ckpt-3, ckpt-4 (the epoch's end), ckpt-6
  const std::string rank1 = dir_ + "/r/checkpoints/ckpt-6/zero/rank-00001-of-00002.safetensors";
  const std::string whole = readFile(rank1);
  ASSERT_GT(whole.size(), 100u);
  fs::resize_file(rank1, whole.size() - 7);
  // Asked for on purpose, the damaged checkpoint is an error naming the file.
  Result direct = run(args + " --set max_steps=7 --resume-from " + dir_ + "/r/checkpoints/ckpt-6");
  EXPECT_NE(direct.code, 0) << direct.output;
  EXPECT_NE(direct.output.find(rank1), std::string::npos) << direct.output;
  // --resume passes over it, naming the file, and falls back to ckpt-4.
  Result resumed = run(args + " --set max_steps=7 --resume");
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("warning: skipping checkpoint: checkpoint file '" + rank1 + "' has " +
                                std::to_string(whole.size() - 7) + " bytes but " +
                                std::to_string(whole.size()) + " were written (truncated or replaced)"),
            std::string::npos)
      << resumed.output;
  EXPECT_NE(resumed.output.find("ckpt-4 (step 4)"), std::string::npos) << resumed.output;
  // A missing rank file is named too.
  const std::string rank0 = dir_ + "/r/checkpoints/ckpt-3/zero/rank-00000-of-00002.safetensors";
  fs::remove(rank0);
  Result missing = runLockstep(
      dir_, "checkpoint consolidate " + dir_ + "/r/checkpoints/ckpt-3 " + dir_ + "/w.safetensors");
  EXPECT_EQ(missing.code, 2) << missing.output;
  EXPECT_NE(missing.output.find("checkpoint file '" + rank0 + "' is missing"), std::string::npos)
      << missing.output;
  EXPECT_FALSE(fs::exists(dir_ + "/w.safetensors"));
}

TEST_F(TrainCli, zero_checkpoint_killed_mid_save_falls_back_and_resumes_bitwise) {
  // Rank 1 dies after writing its partition of step 6's checkpoint, before the manifest: the
  // restarted job resumes from the newest committed one (step 4's, the end of epoch 1), trains to the same
  // model as an uninterrupted run, and the half-written directory is gone.
  std::string cfg = writeConfig("c.yaml", kModel);
  const std::string z2 = world(2) + " --set zero_optimization.stage=2 --set max_steps=8";
  ASSERT_EQ(run(cfg + z2 + " --output-dir " + dir_ + "/s").code, 0);
  ::setenv("LOCKSTEP_TEST_DIE_IN_ZERO_SAVE_AT_STEP", "6", 1);
  Result r = run(cfg + z2 + " --max-restarts 1 --output-dir " + dir_ + "/r");
  ::unsetenv("LOCKSTEP_TEST_DIE_IN_ZERO_SAVE_AT_STEP");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("dying in the middle of the checkpoint of step 6"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ckpt-4 (step 4)"), std::string::npos) << r.output;
  EXPECT_EQ(readFile(dir_ + "/r/model.safetensors"), readFile(dir_ + "/s/model.safetensors"));
  for (const auto& e : fs::directory_iterator(dir_ + "/r/checkpoints"))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  EXPECT_TRUE(fs::exists(dir_ + "/r/checkpoints/ckpt-6/manifest.json"));
}
