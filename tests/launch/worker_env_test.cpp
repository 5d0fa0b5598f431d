#include "lockstep/launch/worker_env.h"

#include <gtest/gtest.h>

#include "lockstep/util/error.h"

using namespace lockstep;
using namespace lockstep::launch;

TEST(LaunchWorkerEnv, rank_layout_is_prefix_sums_of_node_sizes) {
  auto l = computeRankLayout({2, 3, 1}, 1);
  EXPECT_EQ(l.first_rank, 2);
  EXPECT_EQ(l.local_world_size, 3);
  EXPECT_EQ(l.world_size, 6);
  EXPECT_EQ(l.group_world_size, 3);
  EXPECT_EQ(computeRankLayout({2, 3, 1}, 2).first_rank, 5);
  EXPECT_THROW(computeRankLayout({2, 3}, 2), ValueError);
  EXPECT_THROW(computeRankLayout({2, 0}, 0), ValueError);
}

TEST(LaunchWorkerEnv, sets_torchrun_variables) {
  WorkerEnvSpec s;
  s.layout = computeRankLayout({2, 2}, 1);
  s.local_rank = 1;
  s.master_addr = "10.1.1.1";
  s.master_port = 4242;
  s.store_addr = "10.1.1.9";
  s.store_port = 29400;
  s.run_id = "job";
  s.restart_count = 2;
  s.max_restarts = 3;
  s.error_file = "/tmp/x/error.json";
  auto env = buildWorkerEnv({{"PATH", "/bin"}, {"RANK", "99"}}, s);
  EXPECT_EQ(env["RANK"], "3");
  EXPECT_EQ(env["LOCAL_RANK"], "1");
  EXPECT_EQ(env["WORLD_SIZE"], "4");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "2");
  EXPECT_EQ(env["GROUP_RANK"], "1");
  EXPECT_EQ(env["MASTER_ADDR"], "10.1.1.1");
  EXPECT_EQ(env["MASTER_PORT"], "4242");
  // PyTorch's rank 0 hosts its own store on MASTER_PORT; lockstep's workers dial the agents' store.
  EXPECT_EQ(env["TORCHELASTIC_USE_AGENT_STORE"], "False");
  EXPECT_EQ(env["LOCKSTEP_USE_AGENT_STORE"], "1");
  EXPECT_EQ(env["LOCKSTEP_STORE_ADDR"], "10.1.1.9");
  EXPECT_EQ(env["LOCKSTEP_STORE_PORT"], "29400");
  EXPECT_EQ(env["LOCKSTEP_RUN_ID"], "job");
  EXPECT_EQ(env["LOCKSTEP_RESTART_COUNT"], "2");
  EXPECT_EQ(env["LOCKSTEP_MAX_RESTARTS"], "3");
  EXPECT_EQ(env["LOCKSTEP_ERROR_FILE"], "/tmp/x/error.json");
  EXPECT_EQ(env["TORCHELASTIC_ERROR_FILE"], "/tmp/x/error.json");
  EXPECT_EQ(env["LOCKSTEP_STORE_PREFIX"], "/worker/attempt_2/");
  EXPECT_EQ(env["PATH"], "/bin");
}

TEST(LaunchWorkerEnv, omp_threads_default_only_when_sharing_a_node) {
  WorkerEnvSpec s;
  s.layout = computeRankLayout({2}, 0);
  EXPECT_EQ(buildWorkerEnv({}, s)["OMP_NUM_THREADS"], "1");
  EXPECT_EQ(buildWorkerEnv({}, s)[kDefaultedOmpThreads], "2");  // the launcher's 1, for 2 local workers
  EXPECT_EQ(buildWorkerEnv({{"OMP_NUM_THREADS", "4"}}, s)["OMP_NUM_THREADS"], "4");
  EXPECT_EQ(buildWorkerEnv({{"OMP_NUM_THREADS", "1"}}, s).count(kDefaultedOmpThreads), 0u);
  // An outer launcher's mark does not pass for this one's: the 1 it marked is now the agent's own.
  EXPECT_EQ(
      buildWorkerEnv({{"OMP_NUM_THREADS", "1"}, {kDefaultedOmpThreads, "1"}}, s).count(kDefaultedOmpThreads),
      0u);
  EXPECT_EQ(buildWorkerEnv({}, s)["NCCL_ASYNC_ERROR_HANDLING"], "1");  // as torchrun
  EXPECT_EQ(buildWorkerEnv({{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"}}, s)["TORCH_NCCL_ASYNC_ERROR_HANDLING"],
            "0");
  s.layout = computeRankLayout({1, 1}, 0);
  EXPECT_EQ(buildWorkerEnv({}, s).count("OMP_NUM_THREADS"), 0u);
  EXPECT_EQ(buildWorkerEnv({}, s).count(kDefaultedOmpThreads), 0u);
}

TEST(LaunchWorkerEnv, first_attempt_has_restart_count_zero) {
  WorkerEnvSpec s;
  auto env = buildWorkerEnv({}, s);
  EXPECT_EQ(env["LOCKSTEP_RESTART_COUNT"], "0");
  EXPECT_EQ(env["LOCKSTEP_MAX_RESTARTS"], "0");
  EXPECT_EQ(env.count("LOCKSTEP_ERROR_FILE"), 0u);
  auto strings = toEnvStrings({{"A", "1"}, {"B", "x=y"}});
  EXPECT_EQ(strings, (std::vector<std::string>{"A=1", "B=x=y"}));
}
