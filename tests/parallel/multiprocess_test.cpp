// DistributedDataParallel across real processes: the seed 002 example and train_fashion_mnist
// started as ranks the way torchrun would (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), and a rank
// killed mid-training.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "parallel/process_util.h"

using namespace lockstep::test;

TEST(DDPProcesses, two_ranks_train_the_seed_toy) {
  const std::string bin = std::string(LOCKSTEP_EXAMPLES_DIR) + "/ddp_toy_linear";
  const int port = freePort();
  std::vector<Rank> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back(spawnRank({bin, "--max-epochs", "2", "--batch-size", "32"}, r, 2, port,
                              ::testing::TempDir() + "ddp_toy_rank" + std::to_string(r) + ".log"));
  }
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(waitFor(ranks[r].pid, std::chrono::seconds(120)), 0) << slurp(ranks[r].log);
  std::string out0 = slurp(ranks[0].log), out1 = slurp(ranks[1].log);
  // 2048 samples / batch 32 / 2 ranks = 32 steps per epoch on each rank.
  EXPECT_NE(out0.find("[rank 0] Epoch 1 | Batchsize 32 | Steps 32"), std::string::npos) << out0;
  EXPECT_NE(out1.find("[rank 1] Epoch 1 | Batchsize 32 | Steps 32"), std::string::npos) << out1;
  EXPECT_NE(out0.find("final_loss="), std::string::npos) << out0;
}

TEST(DDPProcesses, a_killed_rank_is_reported_not_waited_for) {
  const std::string bin = std::string(LOCKSTEP_EXAMPLES_DIR) + "/ddp_toy_linear";
  const int port = freePort();
  Rank r0 = spawnRank({bin, "--max-epochs", "100000", "--batch-size", "1"}, 0, 2, port,
                      ::testing::TempDir() + "ddp_kill_rank0.log");
  Rank r1 = spawnRank({bin, "--max-epochs", "100000", "--batch-size", "1"}, 1, 2, port,
                      ::testing::TempDir() + "ddp_kill_rank1.log");
  // Let them get into training, then kill rank 1 the hard way.
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (slurp(r1.log).find("Epoch 0") == std::string::npos && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ::kill(r1.pid, SIGKILL);
  waitFor(r1.pid, std::chrono::seconds(5));
  auto t0 = std::chrono::steady_clock::now();
  int code = waitFor(r0.pid, std::chrono::seconds(60));
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string out = slurp(r0.log);
  EXPECT_NE(code, -1) << "rank 0 hung after its peer died:\n" << out;
  EXPECT_NE(code, 0) << out;
  EXPECT_LT(secs, 30.0) << out;
  // The error names the collective, its sequence number and the missing rank.
  EXPECT_NE(out.find("allreduce #"), std::string::npos) << out;
  EXPECT_NE(out.find("ranks [1]"), std::string::npos) << out;
}

// The benchmark's flags: the clock and the DDP timings start after --warmup-steps; the noop hook
// trains the ranks apart; gradients in the buckets train the same as copies. samples/s is the
// job's: all ranks' samples over the slowest rank's time (with noop the ranks do not wait for
// each other, so rank 0's own time could be shorter).
TEST(DDPProcesses, train_fashion_mnist_times_after_the_warmup) {
  const std::string data = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(data))
    GTEST_SKIP() << data << " is not installed (apt-get install dataset-fashion-mnist)";
  const std::string bin = std::string(LOCKSTEP_EXAMPLES_DIR) + "/train_fashion_mnist";
  std::vector<std::string> accuracy;
  for (const char* hook : {"allreduce", "noop"}) {
    SCOPED_TRACE(hook);
    const int port = freePort();
    std::vector<Rank> ranks;
    for (int r = 0; r < 2; ++r) {
      // Under noop, rank 1 takes batches 3x as large, so it is the slower rank by far.
      const bool slow = r == 1 && std::string(hook) == "noop";
      ranks.push_back(
          spawnRank({bin, "--max-steps", "30", "--warmup-steps", "10", "--batch-size", slow ? "96" : "32",
                     "--num-workers", "0", "--ddp-timings", "--gradient-as-bucket-view", "--comm-hook", hook},
                    r, 2, port, ::testing::TempDir() + "tfm_" + hook + std::to_string(r) + ".log"));
    }
    double slowest_step_ms = 0;
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(waitFor(ranks[r].pid, std::chrono::seconds(180)), 0) << slurp(ranks[r].log);
      std::string out = slurp(ranks[r].log);
      // 30 steps, of which the 20 after the warm-up are timed.
      const size_t line = out.find("rank=" + std::to_string(r) + " step_ms=");
      ASSERT_NE(line, std::string::npos) << out;
      EXPECT_NE(out.find(" iterations=20 "), std::string::npos) << out;
      slowest_step_ms = std::max(slowest_step_ms, valueAfter(out, "step_ms", line));
    }
    std::string out0 = slurp(ranks[0].log);
    size_t at = out0.find("test_accuracy=");
    ASSERT_NE(at, std::string::npos) << out0;
    EXPECT_NE(out0.find("steps=30", at), std::string::npos) << out0;
    // 2 ranks x 32 samples per step as rank 0 counts them, at the slowest rank's mean step time
    // (printed to 1 us).
    const double rate = valueAfter(out0, "samples_per_second", at);
    ASSERT_GT(slowest_step_ms, 0) << out0;
    EXPECT_NEAR(rate, 2 * 32 * 1000 / slowest_step_ms, 0.002 * rate) << out0;
    accuracy.push_back(out0.substr(at, 20));
  }
  // Unsynchronised ranks end with different models than synchronised ones.
  EXPECT_NE(accuracy[0], accuracy[1]);
}

TEST(DDPProcesses, train_fashion_mnist_rejects_a_warmup_that_leaves_nothing_to_time) {
  const std::string bin = std::string(LOCKSTEP_EXAMPLES_DIR) + "/train_fashion_mnist";
  const std::string log = ::testing::TempDir() + "tfm_warmup.log";
  const std::string cmd = bin + " --max-steps 5 --warmup-steps 5 > " + log + " 2>&1";
  int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
  std::string out = slurp(log);
  EXPECT_NE(out.find("--warmup-steps 5 leaves no step of --max-steps 5 to time"), std::string::npos) << out;
}
