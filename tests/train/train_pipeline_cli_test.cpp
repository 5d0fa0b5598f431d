// `lockstep train` with a pipeline section, as a user runs it: real ranks through the launcher,
// the model cut into stages, weights as one process's on the same global batch, checkpoints written
// per stage that consolidate into one model file and resume on another stage count (or none), the
// bubble in summary.json, and bad configs refused before any rank starts.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "train/train_cli.h"

using namespace lockstep::test;

namespace {

// mlp 6 -> 8 -> 8 -> 3: six layers (Flatten, Linear, ReLU, Linear, ReLU, Linear).
constexpr const char* kPipelined = R"(
model: {name: mlp, hidden: [8, 8]}
data: {dataset: synthetic, size: 128, test_size: 32, input_shape: [6], num_classes: 3, val_split: 0.25}
train_micro_batch_size_per_gpu: 4
gradient_accumulation_steps: 4
optimizer: {type: AdamW, params: {lr: 0.01, weight_decay: 0.01}}
scheduler: {type: WarmupLR, params: {warmup_num_steps: 5, warmup_max_lr: 0.01}}
gradient_clipping: 0.5
epochs: 3
max_steps: 12
steps_per_print: 3
checkpoint: {every_steps: 3, keep_last: 2}
)";

// metrics.csv's train/loss rows without their wall time: "epoch,step,metric,value".
std::string lossRows(const std::string& dir) {
  std::istringstream in(readFile(dir + "/metrics.csv"));
  std::string line, rows;
  while (std::getline(in, line))
    if (line.find(",train/loss,") != std::string::npos) rows += line.substr(0, line.rfind(',')) + "\n";
  EXPECT_FALSE(rows.empty()) << dir;
  return rows;
}

// One process with one thread, as each rank of the launcher's has on this machine: threads split
// a kernel's sums differently, which is rounding that batch norm's and Adam's arithmetic amplify.
class OneThread {
 public:
  OneThread() : old_(std::getenv("OMP_NUM_THREADS") ? std::getenv("OMP_NUM_THREADS") : "") {
    ::setenv("OMP_NUM_THREADS", "1", 1);
  }
  ~OneThread() {
    if (old_.empty())
      ::unsetenv("OMP_NUM_THREADS");
    else
      ::setenv("OMP_NUM_THREADS", old_.c_str(), 1);
  }

 private:
  std::string old_;
};

// What run(), called in it, gives for one process with one thread (OneThread).
template <typename Run>
Result runOneThread(Run run) {
  OneThread t;
  return run();
}

nlohmann::json summary(const std::string& dir) {
  return nlohmann::json::parse(readFile(dir + "/summary.json"));
}

}  // namespace

TEST_F(TrainCli, pipeline_trains_as_one_process_with_both_schedules) {
  std::string cfg = writeConfig("c.yaml", kPipelined);
  Result one = runOneThread([&] { return run(cfg + " --output-dir " + dir_ + "/one"); });
  ASSERT_EQ(one.code, 0) << one.output;
  for (const char* schedule : {"1f1b", "gpipe"}) {
    const std::string out = dir_ + "/" + schedule;
    Result pp = run(cfg + " --nproc-per-node 2 --output-dir " + out +
                    " --set pipeline.stages=2 --set pipeline.schedule=" + schedule);
    ASSERT_EQ(pp.code, 0) << pp.output;
    EXPECT_NE(
        pp.output.find(std::string("pipeline: 2 stages x 1 replica, schedule ") + schedule +
                       ", 4 micro-batches of 4 per replica; layers [0, 3) on stage 0, [3, 6) on stage 1"),
        std::string::npos)
        << pp.output;
    // Each rank holds its stage's model state only (the whole mlp has 155 parameters).
    EXPECT_NE(pp.output.find(
                  "rank 0: parameters 224 B, gradients 224 B, optimizer states 448 B (pipeline stage 0)"),
              std::string::npos)
        << pp.output;
    EXPECT_NE(pp.output.find(
                  "rank 1: parameters 396 B, gradients 396 B, optimizer states 792 B (pipeline stage 1)"),
              std::string::npos)
        << pp.output;
    EXPECT_LE(safetensorsRelDiff(out + "/model.safetensors", dir_ + "/one/model.safetensors"), 1e-6)
        << schedule;
    const auto s = summary(out), s1 = summary(dir_ + "/one");
    EXPECT_EQ(s["global_batch_size"], 16);
    EXPECT_NEAR(s["test_loss"].get<double>(), s1["test_loss"].get<double>(), 1e-6);
    EXPECT_NEAR(s["val_loss"].get<double>(), s1["val_loss"].get<double>(), 1e-6);
    EXPECT_EQ(s["test_accuracy"], s1["test_accuracy"]);
    const auto& p = s["pipeline"];
    EXPECT_EQ(p["stages"], 2);
    EXPECT_EQ(p["schedule"], schedule);
    EXPECT_EQ(p["boundaries"], nlohmann::json::array({0, 3, 6}));
    EXPECT_NEAR(p["theoretical_bubble"].get<double>(), 1.0 / 5.0, 1e-12);
    ASSERT_EQ(p["ranks"].size(), 2u);
    for (int r = 0; r < 2; ++r) {
      const auto& rank = p["ranks"][r];
      EXPECT_EQ(rank["stage"], r);
      EXPECT_GT(rank["idle_fraction"].get<double>(), 0.0);
      EXPECT_LT(rank["idle_fraction"].get<double>(), 1.0);
      // The stage's measured compute per micro-batch and chunk, and the bubble those costs leave.
      for (const char* kind : {"forward_ms", "backward_ms"}) {
        ASSERT_EQ(rank[kind].size(), 1u) << kind;
        EXPECT_GT(rank[kind][0].get<double>(), 0.0) << kind;
      }
      EXPECT_GE(rank["idle_fraction_for_stage_costs"].get<double>(), 0.0);
      EXPECT_LT(rank["idle_fraction_for_stage_costs"].get<double>(), 1.0);
      EXPECT_GT(rank["peak_rss_bytes"].get<int64_t>(), 1 << 20);
      // The other stage's parameters are released: each rank keeps its stage's 224 / 396 bytes.
      EXPECT_EQ(rank["model_state_bytes_resident"], r == 0 ? 224 : 396);
      // 1F1B holds at most S - s micro-batches' activations, GPipe all of them.
      EXPECT_EQ(rank["activation_slots"], std::string(schedule) == "gpipe" ? 4 : 2 - r);
    }
    // The loss logged at print steps is the whole batch's, as one process logs it.
    EXPECT_EQ(lossRows(out), lossRows(dir_ + "/one"));
  }
  // Written per stage; consolidated, the checkpoint is the run's model.
  EXPECT_TRUE(fs::exists(dir_ + "/1f1b/checkpoints/ckpt-12/pipeline/stage-00000-of-00002.safetensors"));
  EXPECT_TRUE(fs::exists(dir_ + "/1f1b/checkpoints/ckpt-12/pipeline/stage-00001-of-00002.safetensors"));
  Result c =
      runLockstep(dir_, "checkpoint consolidate " + dir_ + "/1f1b/checkpoints " + dir_ + "/w.safetensors");
  ASSERT_EQ(c.code, 0) << c.output;
  EXPECT_NE(c.output.find("(step 12)"), std::string::npos) << c.output;
  EXPECT_EQ(safetensorsRelDiff(dir_ + "/w.safetensors", dir_ + "/1f1b/model.safetensors"), 0.0);
  // format pt, which Hugging Face's from_pretrained requires, as the run's own model file says.
  EXPECT_EQ(lockstep::train::loadSafetensors(dir_ + "/w.safetensors").metadata.at("format"), "pt");
  // OUT inside the checkpoint it reads would spoil it: refused, the checkpoint left as it was.
  Result inside = runLockstep(dir_, "checkpoint consolidate " + dir_ + "/1f1b/checkpoints " + dir_ +
                                        "/1f1b/checkpoints/ckpt-12/model.safetensors");
  EXPECT_EQ(inside.code, 2) << inside.output;
  EXPECT_NE(inside.output.find("is inside the checkpoint it reads"), std::string::npos) << inside.output;
  for (const char* beside : {"/ckpt-9/model.safetensors", "/latest"}) {  // nor another one's file, nor latest
    Result other = runLockstep(dir_, "checkpoint consolidate " + dir_ + "/1f1b/checkpoints/ckpt-12 " + dir_ +
                                         "/1f1b/checkpoints" + beside);
    EXPECT_EQ(other.code, 2) << beside << ": " << other.output;
    EXPECT_NE(other.output.find("is among the checkpoints beside"), std::string::npos) << other.output;
  }
  Result again = runLockstep(
      dir_, "checkpoint consolidate " + dir_ + "/1f1b/checkpoints/ckpt-12 " + dir_ + "/w2.safetensors");
  ASSERT_EQ(again.code, 0) << again.output;
}

// A model of 37.8 MB (mlp 512 -> 2048 -> 2048 -> 2048 -> 3): each rank builds it deferred and
// allocates only its stage's layers, so no rank's memory ever held the whole model.
// eval.every_steps in a pipeline run, as in the trainer's: 6 steps an epoch, max_steps 12.
TEST_F(TrainCli, pipeline_validates_every_so_many_steps) {
  const std::string cfg = writeConfig("pp.yaml", kPipelined);
  Result pp = run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/ev --set pipeline.stages=2" +
                  " --set eval.every_steps=4");
  ASSERT_EQ(pp.code, 0) << pp.output;
  EXPECT_EQ(metricSteps(dir_ + "/ev", "val/loss"), (std::vector<int64_t>{4, 6, 8, 12}))
      << readFile(dir_ + "/ev/metrics.csv");
  EXPECT_NE(pp.output.find("epoch 1 step 4: val_loss="), std::string::npos) << pp.output;
}

TEST_F(TrainCli, pipeline_interleaved_1f1b_trains_as_one_process_and_resumes_as_plain_1f1b) {
  std::string cfg = writeConfig("c.yaml", kPipelined);
  Result one = runOneThread([&] { return run(cfg + " --output-dir " + dir_ + "/one"); });
  ASSERT_EQ(one.code, 0) << one.output;
  const std::string interleaved =
      " --nproc-per-node 2 --set pipeline.stages=2 --set pipeline.schedule=interleaved_1f1b "
      "--set pipeline.virtual_stages=2 --set pipeline.partition_method=uniform";
  Result i = run(cfg + interleaved + " --output-dir " + dir_ + "/i");
  ASSERT_EQ(i.code, 0) << i.output;
  // Six layers in four parts, going round the two stages twice.
  EXPECT_NE(
      i.output.find("pipeline: 2 stages x 1 replica, schedule interleaved_1f1b (2 chunks per stage), 4 "
                    "micro-batches of 4 per replica; layers [0, 2) on stage 0, [2, 4) on stage 1, [4, 5) "
                    "on stage 0, [5, 6) on stage 1"),
      std::string::npos)
      << i.output;
  EXPECT_LE(safetensorsRelDiff(dir_ + "/i/model.safetensors", dir_ + "/one/model.safetensors"), 1e-6);
  EXPECT_EQ(lossRows(dir_ + "/i"), lossRows(dir_ + "/one"));
  const auto s = summary(dir_ + "/i"), s1 = summary(dir_ + "/one");
  EXPECT_NEAR(s["test_loss"].get<double>(), s1["test_loss"].get<double>(), 1e-6);
  const auto& p = s["pipeline"];
  EXPECT_EQ(p["schedule"], "interleaved_1f1b");
  EXPECT_EQ(p["virtual_stages"], 2);
  EXPECT_EQ(p["boundaries"], nlohmann::json::array({0, 2, 4, 5, 6}));
  EXPECT_NEAR(p["theoretical_bubble"].get<double>(), 1.0 / 9.0, 1e-12);  // (S - 1) / (V M + S - 1)
  ASSERT_EQ(p["ranks"].size(), 2u);
  EXPECT_EQ(p["ranks"][0]["layers"], nlohmann::json::parse("[[0, 2], [4, 5]]"));
  EXPECT_EQ(p["ranks"][1]["layers"], nlohmann::json::parse("[[2, 4], [5, 6]]"));
  // Megatron's warm-up: 2 (S - s - 1) + (V - 1) S forwards, then one more, each a chunk's.
  EXPECT_EQ(p["ranks"][0]["activation_slots"], 5);
  EXPECT_EQ(p["ranks"][1]["activation_slots"], 3);
  for (const auto& rank : p["ranks"]) {  // each chunk's compute, and the bubble it leaves
    EXPECT_EQ(rank["forward_ms"].size(), 2u);
    EXPECT_EQ(rank["backward_ms"].size(), 2u);
    EXPECT_LT(rank["idle_fraction_for_stage_costs"].get<double>(), 1.0);
  }
  // A first part without parameters (the mlp's Flatten alone) has no backward to run.
  Result flat = run(cfg + interleaved + " --output-dir " + dir_ + "/f --set pipeline.boundaries=[0,1,2,3,6]");
  ASSERT_EQ(flat.code, 0) << flat.output;
  EXPECT_LE(safetensorsRelDiff(dir_ + "/f/model.safetensors", dir_ + "/one/model.safetensors"), 1e-6);
  // Its checkpoints (each stage's file holds both its chunks) resume on plain 1F1B.
  ASSERT_EQ(run(cfg + interleaved + " --output-dir " + dir_ + "/k --set max_steps=6").code, 0);
  Result rest = run(cfg + " --nproc-per-node 2 --set pipeline.stages=2 --output-dir " + dir_ + "/k --resume");
  ASSERT_EQ(rest.code, 0) << rest.output;
  EXPECT_NE(rest.output.find("(step 6)"), std::string::npos) << rest.output;
  EXPECT_LE(safetensorsRelDiff(dir_ + "/k/model.safetensors", dir_ + "/one/model.safetensors"), 1e-6);
}

TEST_F(TrainCli, pipeline_ranks_allocate_only_their_stage_while_building) {
  std::string cfg = writeConfig("c.yaml", R"(
model: {name: mlp, hidden: [2048, 2048, 2048]}
data: {dataset: synthetic, size: 64, test_size: 8, input_shape: [512], num_classes: 3}
train_micro_batch_size_per_gpu: 2
gradient_accumulation_steps: 2
optimizer: {type: SGD, params: {lr: 0.01}}
max_steps: 1
pipeline: {stages: 2}
)");
  Result pp = run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/pp");
  ASSERT_EQ(pp.code, 0) << pp.output;
  constexpr int64_t kWhole = (512 * 2048 + 2048 + 2 * (2048 * 2048 + 2048) + 2048 * 3 + 3) * 4;
  const nlohmann::json ranks = summary(dir_ + "/pp")["pipeline"]["ranks"];
  ASSERT_EQ(ranks.size(), 2u);
  int64_t resident = 0;
  for (const auto& rank : ranks) {
    const int64_t mine = rank["model_state_bytes_resident"], peak = rank["build_peak_bytes"];
    resident += mine;
    EXPECT_GT(mine, kWhole / 3) << rank;
    // The build's peak is the stage's state and what the process had before (its data), not more.
    EXPECT_GE(peak, mine) << rank;
    EXPECT_LT(peak, mine + kWhole / 8) << rank;
  }
  EXPECT_EQ(resident, kWhole);
}

TEST_F(TrainCli, pipeline_by_data_grid_trains_as_one_process_on_the_global_batch) {
  // 2 stages x 2 replicas (micro-batches of 4, 4 of them, per replica: 32 samples a step) against
  // one process with micro-batches of 8.
  std::string cfg = writeConfig("c.yaml", kPipelined);
  Result one = runOneThread(
      [&] { return run(cfg + " --output-dir " + dir_ + "/one --set train_micro_batch_size_per_gpu=8"); });
  ASSERT_EQ(one.code, 0) << one.output;
  // Buckets of 64 bytes (ddp.bucket_cap_mb, the one ddp key a pipeline takes): several per stage,
  // launched while each stage's last backward runs.
  Result grid = run(cfg + " --nproc-per-node 4 --oversubscribe --output-dir " + dir_ +
                    "/grid --set pipeline.stages=2 --set ddp.bucket_cap_mb=0.00006");
  ASSERT_EQ(grid.code, 0) << grid.output;
  EXPECT_NE(grid.output.find("pipeline: 2 stages x 2 replicas"), std::string::npos) << grid.output;
  EXPECT_EQ(summary(dir_ + "/grid")["global_batch_size"], 32);
  for (const auto& rank : summary(dir_ + "/grid")["pipeline"]["ranks"]) {
    EXPECT_GE(rank["replica_buckets"].get<int64_t>(), 2) << rank.dump();
    EXPECT_EQ(rank["replica_buckets_launched_in_backward"], rank["replica_buckets"]) << rank.dump();
  }
  EXPECT_LE(safetensorsRelDiff(dir_ + "/grid/model.safetensors", dir_ + "/one/model.safetensors"), 1e-6);
  EXPECT_NEAR(summary(dir_ + "/grid")["test_loss"].get<double>(),
              summary(dir_ + "/one")["test_loss"].get<double>(), 1e-6);
}

// ZeRO stage 1 over each stage's replicas (DeepSpeed allows stage 1 with pipelines): each of a
// stage's 2 replicas keeps half of its stage's optimizer state, the weights are one process's,
// every replica writes its partition, and its checkpoints resume without ZeRO and back.
TEST_F(TrainCli, pipeline_with_zero_stage_1_partitions_each_stages_optimizer_state) {
  std::string cfg = writeConfig("c.yaml", kPipelined);
  Result one = runOneThread(
      [&] { return run(cfg + " --output-dir " + dir_ + "/one --set train_micro_batch_size_per_gpu=8"); });
  ASSERT_EQ(one.code, 0) << one.output;
  const std::string grid = " --nproc-per-node 4 --oversubscribe --set pipeline.stages=2";
  Result z = run(cfg + grid + " --output-dir " + dir_ + "/z --set zero_optimization.stage=1");
  ASSERT_EQ(z.code, 0) << z.output;
  EXPECT_LE(safetensorsRelDiff(dir_ + "/z/model.safetensors", dir_ + "/one/model.safetensors"), 1e-6);
  // Stage 0 holds 56 parameters (224 B), AdamW's two states of them 448 B: 224 B per replica.
  for (int r : {0, 1})
    EXPECT_NE(z.output.find("rank " + std::to_string(r) +
                            ": parameters 224 B, gradients 224 B, optimizer states 224 B (pipeline stage 0)"),
              std::string::npos)
        << z.output;
  for (const char* f :
       {"stage-00000-of-00002-zero-00000-of-00002", "stage-00000-of-00002-zero-00001-of-00002",
        "stage-00001-of-00002-zero-00000-of-00002", "stage-00001-of-00002-zero-00001-of-00002"})
    EXPECT_TRUE(fs::exists(dir_ + "/z/checkpoints/ckpt-9/pipeline/" + std::string(f) + ".safetensors")) << f;
  Result c =
      runLockstep(dir_, "checkpoint consolidate " + dir_ + "/z/checkpoints " + dir_ + "/z/whole.safetensors");
  ASSERT_EQ(c.code, 0) << c.output;
  EXPECT_EQ(safetensorsRelDiff(dir_ + "/z/whole.safetensors", dir_ + "/z/model.safetensors"), 0.0);
  // Half the run with ZeRO, the rest without; and the other way round.
  ASSERT_EQ(
      run(cfg + grid + " --output-dir " + dir_ + "/a --set zero_optimization.stage=1 --set max_steps=6").code,
      0);
  Result a = run(cfg + grid + " --output-dir " + dir_ + "/a --resume");
  ASSERT_EQ(a.code, 0) << a.output;
  EXPECT_NE(a.output.find("(step 6)"), std::string::npos) << a.output;
  EXPECT_LE(safetensorsRelDiff(dir_ + "/a/model.safetensors", dir_ + "/one/model.safetensors"), 1e-6);
  ASSERT_EQ(run(cfg + grid + " --output-dir " + dir_ + "/b --set max_steps=6").code, 0);
  Result b = run(cfg + grid + " --output-dir " + dir_ + "/b --resume --set zero_optimization.stage=1");
  ASSERT_EQ(b.code, 0) << b.output;
  EXPECT_NE(b.output.find("(step 6)"), std::string::npos) << b.output;
  EXPECT_LE(safetensorsRelDiff(dir_ + "/b/model.safetensors", dir_ + "/one/model.safetensors"), 1e-6);
}

// Mixed precision: each stage's layers under autocast, activations sent in the dtype they come in;
// fp16's loss scaler agreed by every stage. bf16 and fp16 (its scale starting at 2^30, so that the
// first steps overflow and are skipped) end with one process's weights and scaler state.
TEST_F(TrainCli, pipeline_trains_in_bf16_and_fp16_as_one_process) {
  std::string cfg = writeConfig("c.yaml", kPipelined);
  for (const std::string prec :
       {"--set bf16.enabled=true", "--set fp16.enabled=true --set fp16.initial_scale_power=30"}) {
    Result one = runOneThread([&] { return run(cfg + " --output-dir " + dir_ + "/one " + prec); });
    ASSERT_EQ(one.code, 0) << one.output;
    Result pp = run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/pp --set pipeline.stages=2 " + prec);
    ASSERT_EQ(pp.code, 0) << pp.output;
    EXPECT_EQ(safetensorsRelDiff(dir_ + "/pp/model.safetensors", dir_ + "/one/model.safetensors"), 0.0)
        << prec;
    EXPECT_EQ(summary(dir_ + "/pp")["test_loss"], summary(dir_ + "/one")["test_loss"]) << prec;
    EXPECT_EQ(summary(dir_ + "/pp")["precision"], summary(dir_ + "/one")["precision"]) << prec;
    const auto state = [&](const std::string& run_dir) {
      return nlohmann::json::parse(readFile(run_dir + "/checkpoints/ckpt-12/state.json"))["state"];
    };
    if (prec.find("fp16") != std::string::npos) {
      const auto scaler = state(dir_ + "/pp")["loss_scaler"];
      EXPECT_EQ(scaler, state(dir_ + "/one")["loss_scaler"]);
      EXPECT_GE(scaler["overflows"].get<int>(), 1) << scaler;  // steps were skipped, alike
    }
    fs::remove_all(dir_ + "/one");
    fs::remove_all(dir_ + "/pp");
  }
}

TEST_F(TrainCli, pipeline_checkpoints_resume_on_another_stage_count_and_without_a_pipeline) {
  std::string cfg = writeConfig("c.yaml", kPipelined);
  const OneThread one_thread;  // every run here: the launcher's ranks have one each anyway
  Result straight = run(cfg + " --output-dir " + dir_ + "/s");
  ASSERT_EQ(straight.code, 0) << straight.output;
  // 2 stages to step 6, then 3 stages (boundaries given) to the end.
  ASSERT_EQ(
      run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/p --set pipeline.stages=2 --set max_steps=6")
          .code,
      0);
  Result three = run(cfg + " --nproc-per-node 3 --oversubscribe --output-dir " + dir_ +
                     "/p --resume --set pipeline.stages=3 --set pipeline.boundaries=[0,2,4,6]");
  ASSERT_EQ(three.code, 0) << three.output;
  EXPECT_NE(three.output.find("(step 6)"), std::string::npos) << three.output;
  EXPECT_LE(safetensorsRelDiff(dir_ + "/p/model.safetensors", dir_ + "/s/model.safetensors"), 1e-6);
  // A pipeline checkpoint resumed by plain training, and a plain one by a pipeline.
  ASSERT_EQ(
      run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/q --set pipeline.stages=2 --set max_steps=6")
          .code,
      0);
  Result plain = run(cfg + " --output-dir " + dir_ + "/q --resume");
  ASSERT_EQ(plain.code, 0) << plain.output;
  EXPECT_LE(safetensorsRelDiff(dir_ + "/q/model.safetensors", dir_ + "/s/model.safetensors"), 1e-6);
  // And by ZeRO stage 1 on 2 ranks, which reads its partition of the optimizer state from the
  // stages' files.
  ASSERT_EQ(
      run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/z --set pipeline.stages=2 --set max_steps=6")
          .code,
      0);
  // (2 ranks x 2 micro-batches of 4: the same global batch of 16, another config, so on purpose.)
  Result zero = run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/z --resume-from " + dir_ +
                    "/z/checkpoints --set zero_optimization.stage=1 --set gradient_accumulation_steps=2");
  ASSERT_EQ(zero.code, 0) << zero.output;
  EXPECT_NE(zero.output.find("(step 6)"), std::string::npos) << zero.output;
  EXPECT_LE(safetensorsRelDiff(dir_ + "/z/model.safetensors", dir_ + "/s/model.safetensors"), 1e-6);
  ASSERT_EQ(run(cfg + " --output-dir " + dir_ + "/r --set max_steps=6").code, 0);
  Result piped =
      run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/r --resume --set pipeline.stages=2");
  ASSERT_EQ(piped.code, 0) << piped.output;
  EXPECT_LE(safetensorsRelDiff(dir_ + "/r/model.safetensors", dir_ + "/s/model.safetensors"), 1e-6);
}

TEST_F(TrainCli, pipeline_configs_that_cannot_run_are_refused_before_any_rank_starts) {
  std::string cfg = writeConfig("c.yaml", kPipelined);
  struct Case {
    std::string args, message;
  };
  const Case cases[] = {
      {"--nproc-per-node 3 --oversubscribe --set pipeline.stages=2",
       "pipeline.stages is 2 but the job has 3 ranks: the stages must divide the ranks"},
      {"--set pipeline.stages=2",
       "pipeline.stages is 2 but the job has 1 rank: the stages must divide the ranks"},
      {"--set pipeline.stages=1", "a pipeline needs at least 2 ranks (one per stage), this job has 1"},
      {"--nproc-per-node 2 --set pipeline.stages=auto", "pipeline.stages: expected an integer, got 'auto'"},
      {"--nproc-per-node 2 --set pipeline.stages=2 --set pipeline.seed_layers=true",
       "pipeline.seed_layers: true (seeding each layer apart) is not supported"},
      {"--nproc-per-node 2 --set pipeline.stages=2 --set zero_optimization.stage=2",
       "zero_optimization.stage 2 partitions gradients during each micro-batch's backward"},
      {"--nproc-per-node 2 --set pipeline.stages=2 --set ddp.find_unused_parameters=true",
       "ddp.find_unused_parameters configures DistributedDataParallel, which a pipeline does not use"},
      {"--nproc-per-node 2 --set pipeline.stages=2 --set model.name=linear",
       "model linear has no layer sequence, so it cannot be cut into pipeline stages"},
      {"--nproc-per-node 2 --set pipeline.stages=2 --set pipeline.schedule=zb",
       "pipeline.schedule 'zb' is unknown"},
      {"--nproc-per-node 2 --set pipeline.stages=2 --set pipeline.partition=balanced",
       "lockstep cuts the stages by pipeline.partition_method"},
      {"--nproc-per-node 2 --set pipeline.stages=2 --set pipeline.partition_method=balanced",
       "pipeline.partition_method 'balanced' is unknown"},
      {"--nproc-per-node 2 --set pipeline.stages=2 --set pipeline.boundaries=[0,3]",
       "pipeline.boundaries has 2 values but 2 stages need 3"},
      {"--nproc-per-node 4 --oversubscribe --set pipeline.stages=2 --set train_batch_size=24",
       "data-parallel size (world size 4 / pipeline.stages 2) 2"},
      {"--nproc-per-node 2 --set pipeline.stages=2 --set pipeline.schedule=interleaved_1f1b",
       "pipeline.schedule interleaved_1f1b needs pipeline.virtual_stages >= 2"},
      {"--nproc-per-node 2 --set pipeline.stages=2 --set pipeline.virtual_stages=2",
       "pipeline.virtual_stages is 2 but schedule 1f1b runs one chunk per stage"},
      {"--nproc-per-node 2 --set pipeline.stages=2 --set pipeline.schedule=interleaved_1f1b "
       "--set pipeline.virtual_stages=2 --set gradient_accumulation_steps=3",
       "gradient_accumulation_steps 3 must be a multiple of it"},
  };
  for (const Case& k : cases) {
    Result r = run(cfg + " --output-dir " + dir_ + "/o " + k.args);
    EXPECT_EQ(r.code, 2) << k.args << "\n" << r.output;
    EXPECT_NE(r.output.find(k.message), std::string::npos) << k.args << "\n" << r.output;
    EXPECT_EQ(r.output.find("rank 0"), std::string::npos) << "a rank started: " << k.args << "\n" << r.output;
  }
  // More stages than layers: the partition's own error, from the ranks.
  Result r =
      run(cfg + " --nproc-per-node 8 --oversubscribe --output-dir " + dir_ + "/o --set pipeline.stages=8");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("pipeline.stages is 8 but the model has only 6 layers"), std::string::npos)
      << r.output;
  r = run(
      cfg + " --nproc-per-node 2 --output-dir " + dir_ +
      "/o --set pipeline.stages=2 --set pipeline.schedule=interleaved_1f1b --set pipeline.virtual_stages=4");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("pipeline.stages 2 x pipeline.virtual_stages 4 = 8 parts, but the model has only 6 "
                          "layers"),
            std::string::npos)
      << r.output;
}

TEST_F(TrainCli, pipeline_of_gpt_keeps_its_tied_embedding_and_samples_text) {
  std::string text;
  for (int i = 0; i < 200; ++i)
    text += "the quick brown fox jumps over the lazy dog " + std::to_string(i % 7) + ".\n";
  std::ofstream(dir_ + "/corpus.txt") << text;
  ASSERT_EQ(
      runLockstep(dir_, "data tokenize " + dir_ + "/corpus.txt -o " + dir_ + "/tok --val-fraction 0.2").code,
      0);
  std::string cfg = writeConfig("gpt.yaml",
                                "model: {name: gpt, model_type: gpt-nano, block_size: 32, dropout: 0.1}\n"
                                "data: {dataset: tokens, root: " +
                                    dir_ + "/tok}\n" + R"(
train_micro_batch_size_per_gpu: 2
gradient_accumulation_steps: 4
optimizer: {type: SGD, params: {lr: 0.5, momentum: 0.9, weight_decay: 0.1}}
gradient_clipping: 1.0
max_steps: 4
steps_per_print: 2
sample: {prompt: "the quick", max_new_tokens: 8, temperature: 0.8, top_k: 10}
)");
  Result one = runOneThread([&] { return run(cfg + " --output-dir " + dir_ + "/one"); });
  ASSERT_EQ(one.code, 0) << one.output;
  // The embedding on stage 0 and the head (tied to it) on stage 1; its gradient summed over both.
  // Dropout 0.1: every stage draws the masks one process draws (PipelineStage::countDraws).
  // SGD: Adam would turn the rounding noise of gradients that are zero in exact arithmetic (the
  // attention's key bias) into whole steps of either sign, whatever the order of the sums.
  Result pp = run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/pp --set pipeline.stages=2 --set " +
                  "pipeline.partition_method=type:Block --set pipeline.activation_checkpoint_interval=1");
  ASSERT_EQ(pp.code, 0) << pp.output;
  EXPECT_LE(safetensorsRelDiff(dir_ + "/pp/model.safetensors", dir_ + "/one/model.safetensors"), 1e-6);
  const auto s = summary(dir_ + "/pp"), s1 = summary(dir_ + "/one");
  EXPECT_NEAR(s["val_loss"].get<double>(), s1["val_loss"].get<double>(), 1e-6);
  EXPECT_EQ(s["samples"], s1["samples"]);
  EXPECT_EQ(s["tokens_per_second"].get<double>() > 0, true);
  // Interleaved 1F1B, 2 chunks a stage: each chunk draws its masks after the parts before it.
  Result il = run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/il --set pipeline.stages=2 --set " +
                  "pipeline.schedule=interleaved_1f1b --set pipeline.virtual_stages=2 --set " +
                  "pipeline.partition_method=uniform");
  ASSERT_EQ(il.code, 0) << il.output;
  EXPECT_LE(safetensorsRelDiff(dir_ + "/il/model.safetensors", dir_ + "/one/model.safetensors"), 1e-6);
  EXPECT_EQ(summary(dir_ + "/il")["samples"], s1["samples"]);
  // Stopped after step 2 and resumed: each rank reads only its stage's part of the checkpoint
  // (the tied embedding on both), and the run ends bitwise as the uninterrupted one.
  const std::string stages2 =
      " --nproc-per-node 2 --output-dir " + dir_ +
      "/half --set pipeline.stages=2 --set pipeline.partition_method=type:Block --set "
      "pipeline.activation_checkpoint_interval=1";
  ASSERT_EQ(run(cfg + stages2 + " --set max_steps=2").code, 0);
  Result rest = run(cfg + stages2 + " --resume");
  ASSERT_EQ(rest.code, 0) << rest.output;
  EXPECT_NE(rest.output.find("(step 2)"), std::string::npos) << rest.output;
  EXPECT_EQ(safetensorsRelDiff(dir_ + "/half/model.safetensors", dir_ + "/pp/model.safetensors"), 0.0);
  EXPECT_EQ(summary(dir_ + "/half")["samples"], s["samples"]);
  // `lockstep generate` runs the pipelined model in one process, from the run and from its last
  // checkpoint (the stages' files put together): the run's greedy sample.
  const std::string greedy = s["samples"]["greedy"];
  std::string latest = readFile(dir_ + "/half/checkpoints/latest");
  latest.erase(latest.find_last_not_of('\n') + 1);
  for (const std::string& from : {std::string("/half"), "/half/checkpoints/" + latest}) {
    Result g = runLockstep(
        dir_, "generate " + dir_ + from + " --prompt 'the quick' --max-new-tokens 8 --temperature 0");
    ASSERT_EQ(g.code, 0) << from << ": " << g.output;
    EXPECT_NE(g.output.find("the quick" + greedy), std::string::npos) << from << ": " << g.output;
  }
  // Dropout (0.1, also attention's) draws one process's masks on every stage: 3 stages, GPipe,
  // no recomputation, the same model.
  Result three = run(cfg + " --nproc-per-node 3 --oversubscribe --output-dir " + dir_ +
                     "/three --set pipeline.stages=3 --set pipeline.schedule=gpipe");
  ASSERT_EQ(three.code, 0) << three.output;
  EXPECT_LE(safetensorsRelDiff(dir_ + "/three/model.safetensors", dir_ + "/one/model.safetensors"), 1e-6);
  EXPECT_EQ(summary(dir_ + "/three")["samples"], s1["samples"]);
  // 2 stages x 2 replicas: each replica draws its samples' part of one process's masks for the
  // global micro-batch (replica r's sample j is the one process's sample 2j + r), so the run is one
  // process on micro-batches of 4 (a DDP run, each rank drawing its own masks, is not).
  Result wide = runOneThread(
      [&] { return run(cfg + " --output-dir " + dir_ + "/wide --set train_micro_batch_size_per_gpu=4"); });
  ASSERT_EQ(wide.code, 0) << wide.output;
  Result grid = run(cfg + " --nproc-per-node 4 --oversubscribe --output-dir " + dir_ +
                    "/grid --set pipeline.stages=2 --set pipeline.partition_method=type:Block");
  ASSERT_EQ(grid.code, 0) << grid.output;
  EXPECT_LE(safetensorsRelDiff(dir_ + "/grid/model.safetensors", dir_ + "/wide/model.safetensors"), 1e-6);
}

TEST_F(TrainCli, pipeline_of_resnet_keeps_every_stages_batch_norm_statistics) {
  // Batch norm normalises over what one forward sees, a micro-batch, in one process with gradient
  // accumulation as in the pipeline; each stage's running statistics reach the model file.
  std::string cfg = writeConfig("r.yaml", R"(
model: {name: resnet18_cifar}
data: {dataset: synthetic, size: 16, test_size: 4, input_shape: [3, 32, 32], num_classes: 10}
train_micro_batch_size_per_gpu: 2
gradient_accumulation_steps: 2
optimizer: {type: SGD, params: {lr: 0.05, momentum: 0.9}}
max_steps: 2
)");
  Result one = runOneThread([&] { return run(cfg + " --output-dir " + dir_ + "/one"); });
  ASSERT_EQ(one.code, 0) << one.output;
  Result pp = run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/pp --set pipeline.stages=2");
  ASSERT_EQ(pp.code, 0) << pp.output;
  EXPECT_LE(safetensorsRelDiff(dir_ + "/pp/model.safetensors", dir_ + "/one/model.safetensors"), 1e-6);
  const auto weights = lockstep::train::loadSafetensors(dir_ + "/pp/model.safetensors");
  double moved = 0;  // the last stage's statistics moved from their start (zeros)
  for (double v : weights.at("layer4.1.bn2.running_mean").toVector<double>())
    moved = std::max(moved, std::abs(v));
  EXPECT_GT(moved, 0.0);
}

TEST_F(TrainCli, pipeline_job_whose_stage_is_killed_is_named_and_resumes_from_its_checkpoint) {
  std::string cfg = writeConfig("c.yaml", kPipelined);
  ASSERT_EQ(run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/s --set pipeline.stages=2").code, 0);
  // Stage 1 alone dies after step 7; stage 0 is then stuck in the next step's transfers until the
  // launcher stops it, names the dead rank and restarts both from the checkpoint of step 6.
  ::setenv("LOCKSTEP_TRAIN_CRASH_AFTER_STEP", "7", 1);
  ::setenv("LOCKSTEP_TRAIN_CRASH_RANK", "1", 1);
  Result crashed =
      run(cfg + " --nproc-per-node 2 --max-restarts 1 --output-dir " + dir_ + "/r --set pipeline.stages=2");
  ::unsetenv("LOCKSTEP_TRAIN_CRASH_AFTER_STEP");
  ::unsetenv("LOCKSTEP_TRAIN_CRASH_RANK");
  ASSERT_EQ(crashed.code, 0) << crashed.output;
  EXPECT_NE(crashed.output.find("rank 1: crashing after step 7 (fault injection)"), std::string::npos)
      << crashed.output;
  EXPECT_EQ(crashed.output.find("rank 0: crashing"), std::string::npos) << crashed.output;
  EXPECT_NE(crashed.output.find("root cause: rank 1 (local rank 1"), std::string::npos) << crashed.output;
  EXPECT_NE(crashed.output.find("(step 6)"), std::string::npos) << crashed.output;
  EXPECT_EQ(readFile(dir_ + "/s/model.safetensors"), readFile(dir_ + "/r/model.safetensors"));
}
