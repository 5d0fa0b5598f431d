// `lockstep train` under every way a job starts: a real `mpirun`, one rank with --max-restarts,
// and what cannot work (the mpi backend without mpirun, a launcher inside a launcher) refused
// before any rank trains. Also what summary.json's throughput counts.
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "train/train_cli.h"

using namespace lockstep::test;

namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

Result shell(const std::string& cmd, const std::string& dir) {
  std::string out = dir + "/shell.txt";
  int status = std::system((cmd + " > " + out + " 2>&1").c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, readFile(out)};
}

}  // namespace

TEST_F(TrainCli, mpirun_job_has_the_world_batches_and_summary_of_its_ranks) {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "mpirun not installed";
  std::string cfg = writeConfig("c.yaml", kSynthetic);
  ASSERT_EQ(run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/agent").code, 0);
  Result r = shell(
      "env -u MASTER_ADDR -u MASTER_PORT timeout 120 mpirun -np 2 --allow-run-as-root --oversubscribe " +
          std::string(LOCKSTEP_BIN) + " train " + cfg + " --output-dir " + dir_ + "/mpi",
      dir_);
  ASSERT_EQ(r.code, 0) << r.output;
  auto s = nlohmann::json::parse(readFile(dir_ + "/mpi/summary.json"));
  EXPECT_EQ(s["world_size"], 2);
  EXPECT_EQ(s["global_batch_size"], 8 * 2 * 2);               // micro 8 x accumulation 2 x 2 ranks
  EXPECT_EQ(count(r.output, "world_size="), 1u) << r.output;  // rank 0 alone prints the summary
  // The same job as the launcher's: the same model, bit for bit.
  EXPECT_EQ(readFile(dir_ + "/mpi/model.safetensors"), readFile(dir_ + "/agent/model.safetensors"));
}

TEST_F(TrainCli, max_restarts_restarts_a_one_rank_job) {
  std::string cfg = writeConfig("c.yaml", kSynthetic);
  ASSERT_EQ(run(cfg + " --output-dir " + dir_ + "/s --set max_steps=8").code, 0);
  ::setenv("LOCKSTEP_TRAIN_CRASH_AFTER_STEP", "5", 1);
  Result crashed = run(cfg + " --max-restarts 1 --output-dir " + dir_ + "/r --set max_steps=8");
  ::unsetenv("LOCKSTEP_TRAIN_CRASH_AFTER_STEP");
  ASSERT_EQ(crashed.code, 0) << crashed.output;
  EXPECT_NE(crashed.output.find("fault injection"), std::string::npos) << crashed.output;
  EXPECT_NE(crashed.output.find("(step 4)"), std::string::npos) << crashed.output;
  EXPECT_EQ(readFile(dir_ + "/s/model.safetensors"), readFile(dir_ + "/r/model.safetensors"));
}

TEST_F(TrainCli, mpi_backend_with_nproc_per_node_is_refused_before_any_rank_starts) {
  std::string cfg = writeConfig("c.yaml", kSynthetic);
  Result r = run(cfg + " --nproc-per-node 2 --set backend=mpi --output-dir " + dir_ + "/o");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("mpirun -np 2 lockstep train"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ + "/o/metrics.csv")) << "a rank started";
}

TEST_F(TrainCli, launcher_flags_inside_a_launched_rank_are_refused) {
  std::string cfg = writeConfig("c.yaml", kSynthetic);
  Result r =
      shell("RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29999 " + std::string(LOCKSTEP_BIN) +
                " train " + cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/o",
            dir_);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("already rank 0"), std::string::npos) << r.output;
}

TEST_F(TrainCli, throughput_counts_training_without_evaluation_or_checkpoints) {
  // A large test set and a checkpoint every step make evaluation and writes a visible share.
  std::string cfg = writeConfig("c.yaml", std::string(kSynthetic) + "\n");
  Result r = run(cfg + " --output-dir " + dir_ +
                 "/o --set data.test_size=20000 --set eval.every_epochs=1 "
                 "--set checkpoint.every_steps=1 --set max_steps=12");
  ASSERT_EQ(r.code, 0) << r.output;
  auto s = nlohmann::json::parse(readFile(dir_ + "/o/summary.json"));
  const double train = s["train_seconds"], eval = s["eval_seconds"], ckpt = s["checkpoint_seconds"],
               wall = s["wall_seconds"];
  EXPECT_GT(eval, 0.0);
  EXPECT_GT(ckpt, 0.0);
  EXPECT_NEAR(train + eval + ckpt, wall, 1e-6 + 1e-9 * wall);
  const double samples = s["steps"].get<double>() * s["global_batch_size"].get<double>();
  EXPECT_NEAR(s["samples_per_second"].get<double>(), samples / train, 1e-6 * samples / train);
}

TEST_F(TrainCli, takes_lockstep_runs_flag_spellings_and_auto) {
  std::string cfg = writeConfig("c.yaml", kSynthetic);
  Result r = run(cfg + " --nproc_per_node=2 --output_dir=" + dir_ + "/u --set max_steps=4");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(readFile(dir_ + "/u/summary.json"))["world_size"], 2);
  cpu_set_t set;
  ASSERT_EQ(::sched_getaffinity(0, sizeof set, &set), 0);
  const int cores = CPU_COUNT(&set);
  if (cores > 8) GTEST_SKIP() << cores << " cores: auto would start too many ranks for a test";
  r = run(cfg + " --nproc-per-node auto --output-dir " + dir_ +
          "/a --set max_steps=4 --set train_batch_size=" + std::to_string(16 * cores) +
          " --set train_micro_batch_size_per_gpu=8");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(readFile(dir_ + "/a/summary.json"))["world_size"], cores);
}

TEST_F(TrainCli, out_of_range_counts_are_errors_in_words) {
  std::string cfg = writeConfig("c.yaml", kSynthetic);
  Result r = run(cfg + " --nproc-per-node 0 --output-dir " + dir_ + "/o");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--nproc-per-node expects an integer in [1, 65536], got '0'"), std::string::npos)
      << r.output;
  r = run(cfg + " --max-restarts 99999999999999999999 --output-dir " + dir_ + "/o");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_LT(r.output.size(), 400u) << r.output;  // no 300-digit range
}
