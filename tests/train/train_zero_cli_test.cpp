// `lockstep train` with zero_optimization, as a user runs it: real ranks through the launcher, the
// memory report at the start and in summary.json, weights as DDP's, and a bitwise resume.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "lockstep/train/checkpoint/safetensors.h"
#include "train/train_cli.h"

using namespace lockstep::test;

namespace {

// kSynthetic's mlp 6 -> 8 -> 3: Psi = 83 f32 parameters (odd), Adam.
constexpr int64_t kPsi = 83;

}  // namespace

TEST_F(TrainCli, zero_stage2_reports_memory_and_trains_as_ddp) {
  std::string cfg = writeConfig("c.yaml", kSynthetic);
  ASSERT_EQ(run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/ddp --set max_steps=6").code, 0);
  Result zero =
      run(cfg + " --nproc-per-node 2 --output-dir " + dir_ +
          "/z2 --set max_steps=6 --set zero_optimization.stage=2 --set "
          "zero_optimization.reduce_bucket_size=40 --set zero_optimization.offload_optimizer.device=cpu");
  ASSERT_EQ(zero.code, 0) << zero.output;
  EXPECT_NE(zero.output.find(
                "memory: rank 1: parameters 332 B, gradients 164 B, optimizer states 328 B (ZeRO stage 2)"),
            std::string::npos)
      << zero.output;
  EXPECT_NE(zero.output.find("already live in CPU memory"), std::string::npos) << zero.output;
  auto s = nlohmann::json::parse(readFile(dir_ + "/z2/summary.json"));
  ASSERT_EQ(s["memory"].size(), 2u) << s.dump();
  int64_t grads = 0, states = 0;
  for (int r = 0; r < 2; ++r) {
    const auto& m = s["memory"][r];
    EXPECT_EQ(m["rank"], r);
    EXPECT_EQ(m["parameters"], 4 * kPsi);
    grads += m["gradients"].get<int64_t>();
    states += m["optimizer_states"].get<int64_t>();
    // Measured: the process's peak resident memory (a CPU run: nothing offloaded, no GPU fields).
    EXPECT_GT(m["peak_rss_bytes"].get<int64_t>(), 1 << 20) << m.dump();
    EXPECT_EQ(m["host_offload"], 0) << m.dump();
    EXPECT_FALSE(m.contains("gpu_allocated_peak_bytes")) << m.dump();
  }
  EXPECT_EQ(grads, 4 * kPsi);   // 4 Psi / N on each rank, every element on one rank
  EXPECT_EQ(states, 8 * kPsi);  // 8 Psi / N on each rank
  auto d = nlohmann::json::parse(readFile(dir_ + "/ddp/summary.json"));
  EXPECT_EQ(d["memory"][0]["optimizer_states"], 8 * kPsi);
  EXPECT_EQ(d["memory"][1]["gradients"], 4 * kPsi);
  EXPECT_LE(safetensorsRelDiff(dir_ + "/z2/model.safetensors", dir_ + "/ddp/model.safetensors"), 1e-6);
}

TEST_F(TrainCli, zero_resume_is_bitwise_and_reshards_the_optimizer_state) {
  // Stage 2 on 2 ranks, 8 steps straight == 4 steps, then resumed to 8; and a stage-2 checkpoint
  // resumed by stage 1 (each rank saved its partition; the load reshards).
  std::string cfg = writeConfig("c.yaml", std::string(kSynthetic) + "zero_optimization: {stage: 2}\n");
  ASSERT_EQ(run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/s --set max_steps=8").code, 0);
  ASSERT_EQ(run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/r --set max_steps=4").code, 0);
  Result resumed = run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/r --set max_steps=8 --resume");
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("(step 4)"), std::string::npos) << resumed.output;
  EXPECT_EQ(readFile(dir_ + "/s/model.safetensors"), readFile(dir_ + "/r/model.safetensors"));
  ASSERT_EQ(run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/x --set max_steps=4").code, 0);
  Result stage1 = run(cfg + " --nproc-per-node 2 --output-dir " + dir_ +
                      "/x --set max_steps=8 --resume --set zero_optimization.stage=1");
  ASSERT_EQ(stage1.code, 0) << stage1.output;
  EXPECT_LE(safetensorsRelDiff(dir_ + "/x/model.safetensors", dir_ + "/s/model.safetensors"), 1e-6);
  // zero_to_fp32: the checkpoint of step 8 holds the weights the run ended with.
  Result c =
      runLockstep(dir_, "checkpoint consolidate " + dir_ + "/s/checkpoints " + dir_ + "/w.safetensors");
  ASSERT_EQ(c.code, 0) << c.output;
  EXPECT_NE(c.output.find("(step 8)"), std::string::npos) << c.output;
  EXPECT_EQ(safetensorsRelDiff(dir_ + "/w.safetensors", dir_ + "/s/model.safetensors"), 0.0);
  Result bad = runLockstep(dir_, "checkpoint consolidate " + dir_ + " " + dir_ + "/w2.safetensors");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("is neither a checkpoint"), std::string::npos) << bad.output;
}

TEST_F(TrainCli, zero_stage3_partitions_parameters_trains_as_ddp_and_resumes) {
  // Stage 3 on 2 ranks: parameters 4 Psi / N per rank (pieces of 42 and 41 elements), the weights
  // DDP reaches; 4 steps then resumed to 8 equals 8 straight (bitwise), and its checkpoint resumes
  // under DDP.
  std::string cfg = writeConfig("c.yaml", std::string(kSynthetic) + "zero_optimization: {stage: 3}\n");
  ASSERT_EQ(run(cfg + " --nproc-per-node 2 --output-dir " + dir_ +
                "/ddp --set max_steps=8 --set "
                "zero_optimization.stage=0")
                .code,
            0);
  Result straight = run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/s --set max_steps=8");
  ASSERT_EQ(straight.code, 0) << straight.output;
  EXPECT_NE(straight.output.find(
                "memory: rank 1: parameters 164 B, gradients 164 B, optimizer states 328 B (ZeRO stage 3)"),
            std::string::npos)
      << straight.output;
  auto s = nlohmann::json::parse(readFile(dir_ + "/s/summary.json"));
  ASSERT_EQ(s["memory"].size(), 2u) << s.dump();
  EXPECT_EQ(s["memory"][0]["parameters"].get<int64_t>() + s["memory"][1]["parameters"].get<int64_t>(),
            4 * kPsi);
  EXPECT_LE(safetensorsRelDiff(dir_ + "/s/model.safetensors", dir_ + "/ddp/model.safetensors"), 1e-6);
  ASSERT_EQ(run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/r --set max_steps=4").code, 0);
  Result resumed = run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/r --set max_steps=8 --resume");
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("(step 4)"), std::string::npos) << resumed.output;
  EXPECT_EQ(readFile(dir_ + "/s/model.safetensors"), readFile(dir_ + "/r/model.safetensors"));
  ASSERT_EQ(run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/x --set max_steps=4").code, 0);
  Result ddp = run(cfg + " --nproc-per-node 2 --output-dir " + dir_ +
                   "/x --set max_steps=8 --resume --set zero_optimization.stage=0");
  ASSERT_EQ(ddp.code, 0) << ddp.output;
  EXPECT_LE(safetensorsRelDiff(dir_ + "/x/model.safetensors", dir_ + "/s/model.safetensors"), 1e-6);
}

TEST_F(TrainCli, zero_bf16_keeps_f32_master_weights_resumes_bitwise_and_consolidates_them) {
  // DeepSpeed's bf16 / fp16 with ZeRO: 16-bit parameters and gradients, f32 master weights and
  // Adam states in each rank's partition. bf16 at stages 2 and 3, fp16 (its loss scaler's state in
  // the checkpoint too) at stage 2, on 2 ranks: the memory line is DeepSpeed's layout (stage 2:
  // 2 Psi + 2 Psi / N + 12 Psi / N; stage 3: (4 + 2 + 8) Psi / N, the pieces being the master
  // weights), the weights within the dtype's rounding of DDP's autocast run, 4 steps resumed to 8
  // equal to 8 straight bit for bit, and the checkpoint's consolidation the f32 master weights
  // whose rounding the final 16-bit model file holds.
  const std::pair<const char*, int> runs[] = {{"bf16", 2}, {"bf16", 3}, {"fp16", 2}};
  for (const auto& [precision, stage] : runs) {
    SCOPED_TRACE(std::string(precision) + " stage " + std::to_string(stage));
    const lockstep::DType low =
        std::string(precision) == "bf16" ? lockstep::DType::bf16 : lockstep::DType::f16;
    std::string cfg = writeConfig(std::string(precision) + ".yaml",
                                  std::string(kSynthetic) + precision + ": {enabled: true}\n");
    const std::string tag = std::string(precision) + std::to_string(stage);
    const std::string ddp = dir_ + "/ddp-" + precision;
    if (!fs::exists(ddp + "/model.safetensors")) {
      ASSERT_EQ(run(cfg + " --nproc-per-node 2 --output-dir " + ddp + " --set max_steps=8").code, 0);
    }
    const std::string z = " --set zero_optimization.stage=" + std::to_string(stage);
    const std::string s = dir_ + "/s" + tag, r = dir_ + "/r" + tag;
    Result straight = run(cfg + " --nproc-per-node 2 --output-dir " + s + " --set max_steps=8" + z);
    ASSERT_EQ(straight.code, 0) << straight.output;
    EXPECT_NE(straight.output.find("f32 master weights and optimizer states in each rank's partition"),
              std::string::npos)
        << straight.output;
    const std::string memory =
        stage == 2 ? "memory: rank 1: parameters 166 B, gradients 82 B, optimizer states 492 B"
                   : "memory: rank 1: parameters 164 B, gradients 82 B, optimizer states 328 B";
    EXPECT_NE(straight.output.find(memory), std::string::npos) << straight.output;
    const auto model = lockstep::train::loadSafetensors(s + "/model.safetensors");
    for (const auto& [name, t] : model.tensors) EXPECT_EQ(t.dtype(), low) << name;
    EXPECT_LE(safetensorsRelDiff(s + "/model.safetensors", ddp + "/model.safetensors"), 2e-2);
    ASSERT_EQ(run(cfg + " --nproc-per-node 2 --output-dir " + r + " --set max_steps=4" + z).code, 0);
    Result resumed = run(cfg + " --nproc-per-node 2 --output-dir " + r + " --set max_steps=8 --resume" + z);
    ASSERT_EQ(resumed.code, 0) << resumed.output;
    EXPECT_NE(resumed.output.find("(step 4)"), std::string::npos) << resumed.output;
    EXPECT_EQ(readFile(s + "/model.safetensors"), readFile(r + "/model.safetensors"));
    for (const std::string& run_dir : {s, r}) {
      Result c = runLockstep(
          dir_, "checkpoint consolidate " + run_dir + "/checkpoints " + run_dir + "/w.safetensors");
      ASSERT_EQ(c.code, 0) << c.output;
    }
    EXPECT_EQ(safetensorsRelDiff(s + "/w.safetensors", r + "/w.safetensors"),
              0.0);  // the f32 master weights too
    const auto master = lockstep::train::loadSafetensors(s + "/w.safetensors");
    bool finer = false;
    for (const auto& [name, t] : master.tensors) {
      ASSERT_EQ(t.dtype(), lockstep::DType::f32) << name;
      const lockstep::Tensor* rounded = nullptr;
      for (const auto& [n, m] : model.tensors)
        if (n == name) rounded = &m;
      ASSERT_NE(rounded, nullptr) << name;
      EXPECT_EQ(t.to(low).toVector<float>(), rounded->toVector<float>()) << name;
      finer = finer || t.toVector<float>() != rounded->toVector<float>();
    }
    EXPECT_TRUE(finer) << "the master weights hold no more than their 16-bit rounding";
  }
}

TEST_F(TrainCli, zero_bf16_master_weights_in_bf16_halve_the_states_and_resume_bitwise) {
  // DeepSpeed's bf16_master_weights_and_grads, on 2 ranks: with bf16_optimizer_states at stages 1-3
  // (no f32 copy anywhere), and without it at stage 2 with offload_optimizer cpu (DeepSpeedCPUAdam's
  // f32 states; nothing moves on a CPU run). The memory line is 2 bytes per parameter and 4 (bf16)
  // or 8 (f32) per partition element of Adam's states (rank 1's piece is 41 of Psi = 83); the model
  // file bf16, within bf16's rounding of DDP's autocast run; 4 steps resumed to 8 equal to 8
  // straight bit for bit; the checkpoint's consolidation the model file's values (no finer master
  // weights exist).
  const std::string both =
      writeConfig("bf16m.yaml", std::string(kSynthetic) +
                                    "bf16: {enabled: true, bf16_master_weights_and_grads: true, "
                                    "bf16_optimizer_states: true}\n");
  const std::string alone = writeConfig(
      "bf16w.yaml", std::string(kSynthetic) + "bf16: {enabled: true, bf16_master_weights_and_grads: true}\n");
  const std::string ddp = dir_ + "/ddp";
  std::string plain = writeConfig("bf16.yaml", std::string(kSynthetic) + "bf16: {enabled: true}\n");
  ASSERT_EQ(run(plain + " --nproc-per-node 2 --output-dir " + ddp + " --set max_steps=8").code, 0);
  for (int stage : {1, 2, 3, 0}) {
    const bool f32_states = stage == 0;
    const std::string cfg = f32_states ? alone : both;
    const std::string z =
        f32_states ? " --set zero_optimization.stage=2 --set zero_optimization.offload_optimizer.device=cpu"
                   : " --set zero_optimization.stage=" + std::to_string(stage);
    SCOPED_TRACE(z);
    const std::string s = dir_ + "/s" + std::to_string(stage), r = dir_ + "/r" + std::to_string(stage);
    Result straight = run(cfg + " --nproc-per-node 2 --output-dir " + s + " --set max_steps=8" + z);
    ASSERT_EQ(straight.code, 0) << straight.output;
    EXPECT_NE(straight.output.find("the parameters their own master weights"), std::string::npos)
        << straight.output;
    const std::string memory = std::string("memory: rank 1: parameters ") + (stage == 3 ? "82" : "166") +
                               " B, gradients " + (stage == 1 ? "166" : "82") + " B, optimizer states " +
                               (f32_states ? "328" : "164") + " B";
    EXPECT_NE(straight.output.find(memory), std::string::npos) << memory << "\n" << straight.output;
    const auto model = lockstep::train::loadSafetensors(s + "/model.safetensors");
    for (const auto& [name, t] : model.tensors) EXPECT_EQ(t.dtype(), lockstep::DType::bf16) << name;
    EXPECT_LE(safetensorsRelDiff(s + "/model.safetensors", ddp + "/model.safetensors"), 4e-2);
    ASSERT_EQ(run(cfg + " --nproc-per-node 2 --output-dir " + r + " --set max_steps=4" + z).code, 0);
    Result resumed = run(cfg + " --nproc-per-node 2 --output-dir " + r + " --set max_steps=8 --resume" + z);
    ASSERT_EQ(resumed.code, 0) << resumed.output;
    EXPECT_NE(resumed.output.find("(step 4)"), std::string::npos) << resumed.output;
    EXPECT_EQ(readFile(s + "/model.safetensors"), readFile(r + "/model.safetensors"));
    Result c = runLockstep(dir_, "checkpoint consolidate " + r + "/checkpoints " + r + "/w.safetensors");
    ASSERT_EQ(c.code, 0) << c.output;
    EXPECT_EQ(safetensorsRelDiff(r + "/w.safetensors", s + "/model.safetensors"), 0.0);
  }
}

TEST_F(TrainCli, zero_nvme_offload_trains_bitwise_as_in_memory_resumes_and_leaves_no_file) {
  // Stage 2 on 2 ranks (partitions of 42 and 41 elements) with the optimizer states in swap files,
  // sub-groups of 10: the weights of the same run without offload, bit for bit; a resume reads the
  // states back from the checkpoint into the files; nothing is left in nvme_path.
  const std::string nvme = dir_ + "/nvme";
  fs::create_directories(nvme);
  std::string cfg = writeConfig("c.yaml", std::string(kSynthetic) + "zero_optimization: {stage: 2}\n");
  const std::string offload =
      " --set zero_optimization.offload_optimizer.device=nvme --set "
      "zero_optimization.offload_optimizer.nvme_path=" +
      nvme +
      " --set zero_optimization.sub_group_size=10 --set "
      "zero_optimization.offload_optimizer.pipeline_read=true"
      " --set zero_optimization.offload_optimizer.pin_memory=true";
  ASSERT_EQ(run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/m --set max_steps=8").code, 0);
  Result straight = run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/s --set max_steps=8" + offload);
  ASSERT_EQ(straight.code, 0) << straight.output;
  EXPECT_NE(
      straight.output.find("offload_optimizer.device nvme: each rank's optimizer states live in a swap file "
                           "under " +
                           nvme),
      std::string::npos)
      << straight.output;
  EXPECT_NE(straight.output.find("pin_memory has no effect on a CPU run"), std::string::npos)
      << straight.output;
  // Adam's states of 10-element sub-groups, 2 of them in memory (buffer_count 4): 2 x 2 x 4096 B
  // (each swap buffer is rounded up to the 4096 B of direct I/O).
  EXPECT_NE(
      straight.output.find("memory: rank 1: parameters 332 B, gradients 164 B, optimizer states 16384 B"),
      std::string::npos)
      << straight.output;
  EXPECT_EQ(readFile(dir_ + "/s/model.safetensors"), readFile(dir_ + "/m/model.safetensors"));
  ASSERT_EQ(run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/r --set max_steps=4" + offload).code, 0);
  Result resumed =
      run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/r --set max_steps=8 --resume" + offload);
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("(step 4)"), std::string::npos) << resumed.output;
  EXPECT_EQ(readFile(dir_ + "/r/model.safetensors"), readFile(dir_ + "/m/model.safetensors"));
  EXPECT_TRUE(fs::is_empty(nvme));
  // An nvme_path that does not exist, or that cannot be written: an error naming the key and the
  // directory, before any rank starts (no rank's log line).
  Result bad = run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/b --set max_steps=2" + offload +
                   " --set zero_optimization.offload_optimizer.nvme_path=" + dir_ + "/missing");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(
      bad.output.find("zero_optimization.offload_optimizer.nvme_path: '" + dir_ + "/missing' does not exist"),
      std::string::npos)
      << bad.output;
  EXPECT_EQ(bad.output.find("rank 0"), std::string::npos) << bad.output;
  fs::create_directories(dir_ + "/readonly");
  fs::permissions(dir_ + "/readonly", fs::perms::owner_read | fs::perms::owner_exec);
  if (::access((dir_ + "/readonly").c_str(), W_OK) != 0) {  // (root may write anywhere)
    bad = run(cfg + " --output-dir " + dir_ + "/b --set max_steps=2" + offload +
              " --set zero_optimization.offload_optimizer.nvme_path=" + dir_ + "/readonly");
    EXPECT_EQ(bad.code, 2) << bad.output;
    EXPECT_NE(bad.output.find("nvme_path: '" + dir_ + "/readonly' is not writable"), std::string::npos)
        << bad.output;
  }
  fs::permissions(dir_ + "/readonly", fs::perms::owner_all);
}

TEST_F(TrainCli, zero_stage3_language_model_samples_layer_by_layer_as_ddp) {
  // gpt-nano at stage 3 with no persistent parameters on 2 ranks: its text is generated with each
  // block gathered for its forward (every rank generating), never the whole model; the same text
  // and weights as DDP's run.
  std::string text;
  for (int i = 0; i < 120; ++i)
    text += "pack my box with five dozen liquor jugs " + std::to_string(i % 5) + ".\n";
  std::ofstream(dir_ + "/corpus.txt") << text;
  std::string cfg = writeConfig("lm.yaml",
                                "model: {name: gpt, model_type: gpt-nano, block_size: 16, dropout: 0}\n"
                                "data: {dataset: text, root: " +
                                    dir_ + "/corpus.txt, val_split: 0.1}\n" + R"(
train_micro_batch_size_per_gpu: 2
optimizer: {type: SGD, params: {lr: 0.3}}
zero_allow_untested_optimizer: true
max_steps: 3
sample: {prompt: "pack my", max_new_tokens: 6, temperature: 0.9, top_k: 8}
checkpoint: {every_steps: 3}
)");
  Result ddp = run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/ddp");
  ASSERT_EQ(ddp.code, 0) << ddp.output;
  Result z3 =
      run(cfg + " --nproc-per-node 2 --output-dir " + dir_ +
          "/z3 --set zero_optimization.stage=3 --set zero_optimization.stage3_param_persistence_threshold=0");
  ASSERT_EQ(z3.code, 0) << z3.output;
  const auto a = nlohmann::json::parse(readFile(dir_ + "/z3/summary.json"));
  const auto b = nlohmann::json::parse(readFile(dir_ + "/ddp/summary.json"));
  EXPECT_EQ(a["samples"], b["samples"]);
  EXPECT_FALSE(a["samples"]["sampled"].get<std::string>().empty());
  EXPECT_LE(safetensorsRelDiff(dir_ + "/z3/model.safetensors", dir_ + "/ddp/model.safetensors"), 1e-6);
  // `lockstep generate` reads the partitioned checkpoint (its parameters put together from the
  // ranks' files) as it reads the run's consolidated model: the same greedy text.
  const std::string greedy = a["samples"]["greedy"];
  for (const char* from : {"/z3", "/z3/checkpoints/ckpt-3"}) {
    Result g = runLockstep(
        dir_, "generate " + dir_ + from + " --prompt 'pack my' --max-new-tokens 6 --temperature 0");
    ASSERT_EQ(g.code, 0) << from << ": " << g.output;
    EXPECT_NE(g.output.find("pack my" + greedy), std::string::npos) << from << ": " << g.output;
  }
}
