#include "lockstep/launch/worker_specs.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "process_harness.h"

using namespace lockstep::launch;
using lockstep::launch::testing::TempDir;

namespace {

WorkerSpecsOptions twoOfFourRanks(const TempDir& dir) {
  WorkerSpecsOptions o;
  o.env.layout = computeRankLayout({2, 2}, 1);  // this node: ranks 2 and 3
  o.env.run_id = "job";
  o.program_path = "/usr/bin/prog";
  o.argv = {"prog", "--epochs", "3"};
  o.attempt_dir = dir / "attempt_1";
  o.op_watch_fd = 7;
  return o;
}

bool hasEnv(const WorkerSpec& s, const std::string& kv) {
  return std::find(s.process.env.begin(), s.process.env.end(), kv) != s.process.env.end();
}

}  // namespace

TEST(LaunchWorkerSpecs, one_per_local_rank_with_its_identity_and_directory) {
  TempDir dir;
  auto specs = workerSpecs(twoOfFourRanks(dir), {{"PATH", "/bin"}});
  ASSERT_EQ(specs.size(), 2u);
  for (int lr = 0; lr < 2; ++lr) {
    const auto& s = specs[lr];
    EXPECT_EQ(s.local_rank, lr);
    EXPECT_EQ(s.rank, 2 + lr);
    EXPECT_EQ(s.error_file, dir / "attempt_1/" + std::to_string(2 + lr) + "/error.json");
    EXPECT_TRUE(std::filesystem::is_directory(dir / "attempt_1/" + std::to_string(2 + lr)));
    EXPECT_EQ(s.process.path, "/usr/bin/prog");
    EXPECT_EQ(s.process.argv, (std::vector<std::string>{"prog", "--epochs", "3"}));
    EXPECT_TRUE(hasEnv(s, "RANK=" + std::to_string(2 + lr)));
    EXPECT_TRUE(hasEnv(s, "LOCAL_RANK=" + std::to_string(lr)));
    EXPECT_TRUE(hasEnv(s, "LOCKSTEP_ERROR_FILE=" + s.error_file));
    EXPECT_TRUE(hasEnv(s, "LOCKSTEP_OP_WATCH_FD=7"));
    EXPECT_TRUE(hasEnv(s, "PATH=/bin"));
  }
}

TEST(LaunchWorkerSpecs, streams_follow_redirects_tee_and_log_files) {
  TempDir dir;
  auto o = twoOfFourRanks(dir);
  o.redirects = parseStreamSelection("--redirects", "0:3");  // local rank 0: both to files only
  o.tee = parseStreamSelection("--tee", "1:1");              // local rank 1: stdout to file and console
  auto specs = workerSpecs(o, {});
  const auto& quiet = specs[0].process;
  ASSERT_TRUE(quiet.stdout_sink.has_value());
  EXPECT_EQ(quiet.stdout_sink->console_fd, -1);
  EXPECT_EQ(quiet.stdout_sink->file_path, dir / "attempt_1/2/stdout.log");
  EXPECT_EQ(quiet.stderr_sink->console_fd, -1);
  EXPECT_EQ(quiet.stderr_sink->file_path, dir / "attempt_1/2/stderr.log");
  const auto& teed = specs[1].process;
  EXPECT_EQ(teed.stdout_sink->console_fd, STDOUT_FILENO);
  EXPECT_EQ(teed.stdout_sink->file_path, dir / "attempt_1/3/stdout.log");
  EXPECT_EQ(teed.stderr_sink->file_path, "");  // stderr is piped for its tail, not written to a file
  EXPECT_EQ(teed.stderr_sink->console_prefix, "[rank 3] ");

  o.redirects = {};
  o.tee = {};
  // Several ranks: both streams of every rank through the agent, line by line, prefixed but rank 0.
  auto piped = workerSpecs(o, {});
  EXPECT_EQ(piped[1].process.stdout_sink->console_fd, STDOUT_FILENO);
  EXPECT_EQ(piped[1].process.stdout_sink->console_prefix, "[rank 3] ");
  EXPECT_EQ(piped[1].process.stdout_sink->file_path, "");
  o.env.layout = computeRankLayout({1}, 0);
  EXPECT_FALSE(workerSpecs(o, {})[0].process.stdout_sink.has_value());  // one rank: stdout inherited
  EXPECT_EQ(workerSpecs(o, {})[0].process.stderr_sink->console_prefix, "");
  o.console = true;  // a progress line is drawn
  EXPECT_TRUE(workerSpecs(o, {})[0].process.stdout_sink.has_value());
  o.env.layout = computeRankLayout({2, 2}, 1);
  o.log_files = true;
  EXPECT_EQ(workerSpecs(o, {})[1].process.stderr_sink->file_path, dir / "attempt_1/3/stderr.log");
}
