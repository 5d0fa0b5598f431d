// `lockstep train` end to end, as a user runs it: the built binary on a synthetic dataset with
// max_steps (fast), its outputs, bitwise resume, 2 ranks, and every bad input exiting with 2.
#include "train/train_cli.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "lockstep/tensor/device.h"

using namespace lockstep::test;
namespace fs = std::filesystem;

TEST_F(TrainCli, trains_and_writes_every_output) {
  std::string cfg = writeConfig("c.yaml", kSynthetic);
  Result r = run(cfg + " --output-dir " + dir_ + "/o");
  ASSERT_EQ(r.code, 0) << r.output;
  auto s = nlohmann::json::parse(readFile(dir_ + "/o/summary.json"));
  for (const char* k : {"world_size", "epochs", "steps", "global_batch_size", "samples_per_second",
                        "train_seconds", "test_accuracy", "test_loss"}) {
    EXPECT_TRUE(s.contains(k)) << k;
  }
  EXPECT_EQ(s["steps"], 20);
  EXPECT_EQ(s["world_size"], 1);
  EXPECT_EQ(s["global_batch_size"], 16);
  EXPECT_FALSE(s.contains("ddp_timings"));  // one rank: no DDP
  EXPECT_TRUE(fs::exists(dir_ + "/o/model.safetensors"));
  EXPECT_TRUE(fs::exists(dir_ + "/o/checkpoints/latest"));
  std::string csv = readFile(dir_ + "/o/metrics.csv");
  EXPECT_NE(csv.find("train/loss"), std::string::npos);
  EXPECT_NE(csv.find("val/accuracy"), std::string::npos);
  bool events = false;
  for (auto& e : fs::recursive_directory_iterator(dir_ + "/o/tensorboard")) {
    events |= e.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  }
  EXPECT_TRUE(events);
  EXPECT_NE(r.output.find("val_accuracy="), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("step 3/20"), std::string::npos) << r.output;  // plain lines when not a tty
}

TEST_F(TrainCli, resume_is_bitwise_identical_and_skips_a_corrupt_checkpoint) {
  std::string cfg = writeConfig("c.yaml", kSynthetic);
  ASSERT_EQ(run(cfg + " --output-dir " + dir_ + "/straight").code, 0);
  // "Killed" at step 9 (mid-epoch: 6 steps per epoch), then resumed to 20.
  Result first = run(cfg + " --output-dir " + dir_ + "/r --set max_steps=9");
  ASSERT_EQ(first.code, 0) << first.output;
  Result second = run(cfg + " --output-dir " + dir_ + "/r --resume");
  ASSERT_EQ(second.code, 0) << second.output;
  EXPECT_NE(second.output.find("(step 9)"), std::string::npos) << second.output;
  EXPECT_EQ(readFile(dir_ + "/straight/model.safetensors"), readFile(dir_ + "/r/model.safetensors"));
  // metrics.csv keeps the first run's rows: one header, then rows of both runs.
  std::string csv = readFile(dir_ + "/r/metrics.csv");
  size_t headers = 0;
  for (size_t at = csv.find("epoch,step,metric,value"); at != std::string::npos;
       at = csv.find("epoch,step,metric,value", at + 1)) {
    ++headers;
  }
  EXPECT_EQ(headers, 1u) << csv;
  EXPECT_NE(csv.find(",3,train/loss,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",12,train/loss,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",20,val/loss,"), std::string::npos) << csv;
  // Corrupt the newest checkpoint: resume falls back to the previous one with a warning.
  ASSERT_EQ(run(cfg + " --output-dir " + dir_ + "/c --set max_steps=9").code, 0);
  std::string newest = dir_ + "/c/checkpoints/" + readFile(dir_ + "/c/checkpoints/latest");
  while (!newest.empty() && (newest.back() == '\n' || newest.back() == ' ')) newest.pop_back();
  {
    std::fstream f(newest + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << newest;
    f.seekg(-3, std::ios::end);
    char c = static_cast<char>(f.get());
    f.seekp(-3, std::ios::end);
    f.put(static_cast<char>(c ^ 0x5a));
  }
  Result third = run(cfg + " --output-dir " + dir_ + "/c --resume");
  ASSERT_EQ(third.code, 0) << third.output;
  EXPECT_NE(third.output.find("(step 8)"), std::string::npos) << third.output;
  EXPECT_EQ(readFile(dir_ + "/straight/model.safetensors"), readFile(dir_ + "/c/model.safetensors"));
}

TEST_F(TrainCli, two_ranks_through_the_launcher_resume_bitwise) {
  std::string cfg = writeConfig("c.yaml", kSynthetic);
  Result straight = run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/s --set max_steps=8");
  ASSERT_EQ(straight.code, 0) << straight.output;
  auto s = nlohmann::json::parse(readFile(dir_ + "/s/summary.json"));
  EXPECT_EQ(s["world_size"], 2);
  EXPECT_EQ(s["global_batch_size"], 32);
  EXPECT_EQ(s["steps"], 8);
  // Every rank's DDP timings: one synchronized backward per step (the other micro-step is no_sync).
  ASSERT_EQ(s["ddp_timings"].size(), 2u) << s.dump();
  for (const auto& t : s["ddp_timings"]) {
    EXPECT_EQ(t["iterations"], 8) << t.dump();
    EXPECT_GT(t["forward_compute_ms"].get<double>(), 0) << t.dump();
    EXPECT_GE(t["backward_comm_ms"].get<double>(), t["backward_comm_wait_ms"].get<double>()) << t.dump();
  }
  EXPECT_NE(straight.output.find("ddp ms per step"), std::string::npos) << straight.output;
  ASSERT_EQ(run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/r --set max_steps=4").code, 0);
  Result resumed = run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/r --set max_steps=8 --resume");
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("(step 4)"), std::string::npos) << resumed.output;
  EXPECT_EQ(readFile(dir_ + "/s/model.safetensors"), readFile(dir_ + "/r/model.safetensors"));
}

TEST_F(TrainCli, two_ranks_log_the_loss_of_the_whole_global_batch) {
  // 2 ranks x micro-batch 8 log what 1 rank x micro-batch 16 logs: the mean over all ranks' samples
  // (the ranks' shards interleave, so the global batches hold the same samples).
  std::string cfg = writeConfig("c.yaml", kSynthetic);
  ASSERT_EQ(run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/two --set max_steps=6").code, 0);
  Result one =
      run(cfg + " --output-dir " + dir_ + "/one --set max_steps=6 --set train_micro_batch_size_per_gpu=16");
  ASSERT_EQ(one.code, 0) << one.output;
  auto losses = [&](const std::string& csv) {
    std::vector<double> out;
    std::istringstream in(csv);
    for (std::string line; std::getline(in, line);) {
      auto at = line.find(",train/loss,");
      if (at != std::string::npos) out.push_back(std::stod(line.substr(at + 12)));
    }
    return out;
  };
  std::vector<double> two = losses(readFile(dir_ + "/two/metrics.csv")),
                      ref = losses(readFile(dir_ + "/one/metrics.csv"));
  ASSERT_EQ(two.size(), 2u);
  ASSERT_EQ(ref.size(), 2u);
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(two[i], ref[i], 1e-5 * std::abs(ref[i])) << i;
}

TEST_F(TrainCli, ddp_options_come_from_the_config) {
  // Gradients kept in the buckets average exactly as copied ones do; the noop hook trains apart.
  std::string cfg = writeConfig("c.yaml", kSynthetic);
  ASSERT_EQ(run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/copy --set max_steps=4").code, 0);
  Result view = run(cfg + " --nproc-per-node 2 --output-dir " + dir_ +
                    "/view --set max_steps=4 --set ddp.gradient_as_bucket_view=true");
  ASSERT_EQ(view.code, 0) << view.output;
  ASSERT_FALSE(readFile(dir_ + "/copy/model.safetensors").empty());
  EXPECT_EQ(readFile(dir_ + "/copy/model.safetensors"), readFile(dir_ + "/view/model.safetensors"));
  Result apart = run(cfg + " --nproc-per-node 2 --output-dir " + dir_ +
                     "/apart --set max_steps=4 --set ddp.comm_hook=noop");
  ASSERT_EQ(apart.code, 0) << apart.output;
  EXPECT_NE(readFile(dir_ + "/copy/model.safetensors"), readFile(dir_ + "/apart/model.safetensors"));
}

TEST_F(TrainCli, max_restarts_resumes_a_crashed_job_bitwise) {
  std::string cfg = writeConfig("c.yaml", kSynthetic);
  ASSERT_EQ(run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/s --set max_steps=8").code, 0);
  ::setenv("LOCKSTEP_TRAIN_CRASH_AFTER_STEP", "5", 1);
  Result crashed =
      run(cfg + " --nproc-per-node 2 --max-restarts 1 --output-dir " + dir_ + "/r --set max_steps=8");
  ::unsetenv("LOCKSTEP_TRAIN_CRASH_AFTER_STEP");
  ASSERT_EQ(crashed.code, 0) << crashed.output;
  EXPECT_NE(crashed.output.find("fault injection"), std::string::npos) << crashed.output;
  EXPECT_NE(crashed.output.find("(step 4)"), std::string::npos) << crashed.output;  // every_steps: 4
  EXPECT_EQ(readFile(dir_ + "/s/model.safetensors"), readFile(dir_ + "/r/model.safetensors"));
}

TEST_F(TrainCli, bad_input_exits_2_with_a_clear_message) {
  struct Case {
    std::string config, extra, expect;
  };
  std::string base =
      "train_micro_batch_size_per_gpu: 8\ndata: {dataset: synthetic, size: 32}\nmax_steps: 1\n";
  std::ofstream(dir_ + "/a_file") << "x";
  std::vector<Case> cases = {
      {base + "optimizer: {params: {lrr: 0.1}}", "",
       "unknown key optimizer.params.lrr (did you mean optimizer.params.lr?)"},
      {base + "epochs: three", "", "epochs: expected an integer, got 'three'"},
      {base + "zero_optimization: {stage: 4}", "", "zero_optimization.stage: expected 0, 1, 2 or 3, got 4"},
      {base + "train_batch_size: 20\ngradient_accumulation_steps: 2", "", "world size 1"},
      {"train_micro_batch_size_per_gpu: 8\ndata: {dataset: fashion_mnist, root: /nonexistent/fm}", "",
       "/nonexistent/fm"},
      {base, "--output-dir " + dir_ + "/a_file/sub", "output dir"},
      {base, "--set epochs", "expected key=value"},
      {base + "model: nosuchmodel", "", "nosuchmodel"},
      {base + "backend: glo", "", "unknown backend 'glo' (did you mean gloo?); built: shm, gloo"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    std::string cfg = writeConfig("bad" + std::to_string(i) + ".yaml", cases[i].config);
    std::string extra = cases[i].extra.empty() ? "--output-dir " + dir_ + "/o" : cases[i].extra;
    Result r = run(cfg + " " + extra);
    EXPECT_EQ(r.code, 2) << cases[i].config << "\n" << r.output;
    EXPECT_NE(r.output.find(cases[i].expect), std::string::npos) << r.output;
  }
  Result missing = run(dir_ + "/no_such_config.yaml");
  EXPECT_EQ(missing.code, 2) << missing.output;
  EXPECT_NE(missing.output.find("no_such_config.yaml"), std::string::npos) << missing.output;
  // Bad input is caught before any rank starts.
  Result launched =
      run(writeConfig("l.yaml", base + "epochs: x") + " --nproc-per-node 2 --output-dir " + dir_ + "/o");
  EXPECT_EQ(launched.code, 2) << launched.output;
}

// backend nccl where it cannot run (not built, or built but no GPU here): refused by the
// launching process, before any rank starts.
TEST_F(TrainCli, unrunnable_backend_exits_2_before_any_rank_starts) {
  if (lockstep::cudaDeviceCount() > 0) GTEST_SKIP() << "this machine has a GPU: nccl runs here";
  std::string cfg = writeConfig("nccl.yaml", std::string(kSynthetic) + "backend: nccl\n");
  Result r = run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/o");
  EXPECT_EQ(r.code, 2) << r.output;
  const std::string expect = lockstep::builtWithCuda()
                                 ? "backend nccl needs a CUDA GPU, but this process sees none"
                                 : "backend nccl is not built into this lockstep";
  EXPECT_NE(r.output.find(expect), std::string::npos) << r.output;
  // Said once, by the launching process: a started worker would have said it again.
  EXPECT_EQ(r.output.find("backend nccl"), r.output.rfind("backend nccl")) << r.output;
  EXPECT_EQ(r.output.find("rank 0"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("worker"), std::string::npos) << r.output;
}

TEST_F(TrainCli, device_cuda_without_a_gpu_is_refused_before_any_rank_starts) {
  if (lockstep::cudaDeviceCount() > 0) GTEST_SKIP() << "this machine has a GPU";
  std::string cfg = writeConfig("c2.yaml", std::string(kSynthetic) + "device: cuda\n");
  Result r = run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/o");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("cuda:1 is not available"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("rank 0"), std::string::npos) << r.output;
}

TEST_F(TrainCli, device_cuda_without_a_gpu_is_a_clear_error) {
  if (lockstep::cudaDeviceCount() > 0)
    GTEST_SKIP() << "this machine has a GPU (tests/train/gpu_train_test.cpp trains on it)";
  std::string cfg = writeConfig("c.yaml", std::string(kSynthetic) + "device: cuda\n");
  Result r = run(cfg + " --output-dir " + dir_ + "/out");
  EXPECT_EQ(r.code, 2) << r.output;  // a config error, as the others
  EXPECT_NE(r.output.find("cuda:0 is not available"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("rank 0"), std::string::npos) << r.output;
}

// Runs on GPU machines too (they have fewer than 65 GPUs): a device ordinal past the count.
TEST_F(TrainCli, a_gpu_ordinal_past_the_count_is_a_config_error) {
  std::string cfg = writeConfig("c.yaml", std::string(kSynthetic) + "device: cuda:64\n");
  Result r = run(cfg + " --output-dir " + dir_ + "/out");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("cuda:64 is not available"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/out/run.json")) << r.output;
}
