// End-to-end tests of `lockstep run` on one host: real agent, real worker processes.
#include <gtest/gtest.h>

#include <csignal>

#include "process_harness.h"

using namespace lockstep::launch::testing;
using namespace std::chrono_literals;

namespace {

const std::string kWorker = LOCKSTEP_TEST_WORKER;

// Every process the workers created (they log their pids) must be gone.
#define EXPECT_NO_SURVIVORS(pidfile)                                                       \
  do {                                                                                     \
    auto pids_ = pidsIn(pidfile);                                                          \
    EXPECT_FALSE(pids_.empty()) << "no worker recorded its pid";                           \
    auto left_ = survivors(pidfile);                                                       \
    EXPECT_TRUE(left_.empty()) << left_.size() << " process(es) outlived the agent, e.g. " \
                               << (left_.empty() ? 0 : left_[0]);                          \
  } while (0)

}  // namespace

TEST(LaunchAgent, all_ranks_succeed_with_their_environment) {
  TempDir dir;
  auto r = runAgent(
      {"--nproc-per-node", "3", "--standalone", kWorker, "--pidfile", dir / "pids", "--env-out", dir.path()},
      dir / "out");
  ASSERT_EQ(r.code, 0) << r.output;
  for (int rank = 0; rank < 3; ++rank) {
    std::string env = readAll(dir / ("env." + std::to_string(rank) + ".0"));
    EXPECT_TRUE(contains(env, "RANK=" + std::to_string(rank) + "\n")) << env;
    EXPECT_TRUE(contains(env, "LOCAL_RANK=" + std::to_string(rank) + "\n")) << env;
    EXPECT_TRUE(contains(env, "WORLD_SIZE=3\n")) << env;
    EXPECT_TRUE(contains(env, "LOCAL_WORLD_SIZE=3\n")) << env;
    EXPECT_TRUE(contains(env, "GROUP_RANK=0\n")) << env;
    EXPECT_TRUE(contains(env, "MASTER_ADDR=127.0.0.1\n")) << env;
    EXPECT_FALSE(contains(env, "MASTER_PORT=0\n")) << env;  // --standalone: the chosen port
    EXPECT_TRUE(contains(env, "LOCKSTEP_RESTART_COUNT=0\n")) << env;
    EXPECT_TRUE(contains(env, "LOCKSTEP_MAX_RESTARTS=0\n")) << env;
    EXPECT_TRUE(contains(env, "OMP_NUM_THREADS=1\n")) << env;
    EXPECT_TRUE(contains(env, "LOCKSTEP_DEFAULTED_OMP_NUM_THREADS=3\n")) << env;  // the launcher's 1
    EXPECT_FALSE(contains(env, "LOCKSTEP_ERROR_FILE=<unset>")) << env;
  }
  EXPECT_NO_SURVIVORS(dir / "pids");
}

TEST(LaunchAgent, failing_rank_stops_the_others_and_is_named) {
  TempDir dir;
  // Ranks 0 and 2 would hang forever: only the agent's stop can end them.
  auto r = runAgent({"--nproc-per-node", "3", "--standalone", kWorker, "--pidfile", dir / "pids",
                     "--fail-rank", "1", "--code", "3", "--fail-after-ms", "100", "--error-file", "--hang"},
                    dir / "out", 20s);
  ASSERT_EQ(r.code, 3) << r.output;  // the root cause's own code, for a cluster's restart policy
  EXPECT_TRUE(contains(r.output, "root cause: rank 1 (local rank 1 on host")) << r.output;
  EXPECT_TRUE(contains(r.output, "exited with code 3")) << r.output;
  EXPECT_TRUE(contains(r.output, "rank 1: failing on purpose with code 3")) << r.output;  // stderr tail
  EXPECT_TRUE(contains(r.output, "ValueError: bad batch on rank 1")) << r.output;         // error file
  EXPECT_FALSE(contains(r.output, "root cause: rank 0")) << r.output;
  EXPECT_NO_SURVIVORS(dir / "pids");
}

TEST(LaunchAgent, kill9_of_a_worker_restarts_and_completes) {
  TempDir dir;
  ChildProcess agent({LOCKSTEP_RUN_BIN, "--nproc-per-node", "2", "--standalone", "--max-restarts", "1",
                      kWorker, "--pidfile", dir / "pids", "--victim-rank", "1", "--victim-dir", dir.path(),
                      "--env-out", dir.path(), "--sleep-ms", "50"},
                     dir / "out");
  ASSERT_TRUE(waitForFile(dir / "victim", 10s)) << agent.output();
  pid_t victim = static_cast<pid_t>(std::stol(readAll(dir / "victim")));
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  int code = agent.wait(20s);
  std::string out = agent.output();
  ASSERT_EQ(code, 0) << out;
  EXPECT_TRUE(contains(out, "root cause: rank 1")) << out;
  EXPECT_TRUE(contains(out, "was killed by signal SIGKILL (9)")) << out;
  EXPECT_TRUE(contains(out, "restarting the group (restart 1 of 1)")) << out;
  EXPECT_TRUE(contains(readAll(dir / "env.1.1"), "LOCKSTEP_RESTART_COUNT=1\n"));
  EXPECT_TRUE(contains(readAll(dir / "env.0.1"), "LOCKSTEP_RESTART_COUNT=1\n"));
  EXPECT_NO_SURVIVORS(dir / "pids");
}

TEST(LaunchAgent, restarts_are_bounded_by_max_restarts) {
  TempDir dir;
  auto r = runAgent({"--nproc-per-node", "2", "--standalone", "--max-restarts", "2", kWorker, "--pidfile",
                     dir / "pids", "--fail-rank", "0", "--code", "5"},
                    dir / "out", 20s);
  ASSERT_EQ(r.code, 5) << r.output;
  EXPECT_TRUE(contains(r.output, "restart 2 of 2")) << r.output;
  EXPECT_TRUE(contains(r.output, "job failed")) << r.output;
  EXPECT_GE(pidsIn(dir / "pids").size(), 3u);  // 3 attempts (a rank may be stopped before it logs)
  EXPECT_NO_SURVIVORS(dir / "pids");
}

TEST(LaunchAgent, grandchildren_die_with_the_job) {
  TempDir dir;
  // Each worker leaves a sleeping grandchild; with --escaping-grandchild it even calls setsid().
  for (const char* flag : {"--grandchild", "--escaping-grandchild"}) {
    auto r = runAgent({"--nproc-per-node", "2", "--standalone", kWorker, "--pidfile", dir / "pids", flag,
                       "--fail-rank", "0", "--fail-after-ms", "100", "--hang"},
                      dir / "out", 20s);
    EXPECT_EQ(r.code, 1) << flag << r.output;
    EXPECT_EQ(pidsIn(dir / "pids").size(), 4u) << flag;
    EXPECT_NO_SURVIVORS(dir / "pids");
    std::filesystem::remove(dir / "pids");
  }
  // And after a successful run too.
  auto ok = runAgent(
      {"--nproc-per-node", "2", "--standalone", kWorker, "--pidfile", dir / "pids", "--escaping-grandchild"},
      dir / "out", 20s);
  EXPECT_EQ(ok.code, 0) << ok.output;
  EXPECT_NO_SURVIVORS(dir / "pids");
}

TEST(LaunchAgent, sigterm_and_sigint_reach_the_workers) {
  for (int sig : {SIGTERM, SIGINT}) {
    TempDir dir;
    ChildProcess agent({LOCKSTEP_RUN_BIN, "--nproc-per-node", "2", "--standalone", kWorker, "--pidfile",
                        dir / "pids", "--grandchild", "--hang"},
                       dir / "out");
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (pidsIn(dir / "pids").size() < 4 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(5ms);
    ASSERT_EQ(pidsIn(dir / "pids").size(), 4u) << agent.output();
    ::kill(agent.pid(), sig);
    EXPECT_EQ(agent.wait(15s), 128 + sig) << agent.output();
    EXPECT_TRUE(contains(agent.output(), "stopped by")) << agent.output();
    EXPECT_NO_SURVIVORS(dir / "pids");
  }
}

TEST(LaunchAgent, workers_ignoring_sigterm_are_killed_after_the_grace_period) {
  TempDir dir;
  auto r = runAgent({"--nproc-per-node", "2", "--standalone", "--grace-period", "0.3", kWorker, "--pidfile",
                     dir / "pids", "--ignore-term", "--fail-rank", "1", "--fail-after-ms", "100", "--hang"},
                    dir / "out", 20s);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "root cause: rank 1")) << r.output;
  EXPECT_NO_SURVIVORS(dir / "pids");
}

TEST(LaunchAgent, node_that_never_arrives_times_out_clearly) {
  TempDir dir;
  auto r = runAgent({"--nnodes", "2", "--node-rank", "0", "--master-port", std::to_string(freePort()),
                     "--rdzv-timeout", "1", kWorker, "--pidfile", dir / "pids"},
                    dir / "out", 20s);
  EXPECT_EQ(r.code, 143) << r.output;  // retryable: the node may be there next time
  EXPECT_TRUE(contains(r.output, "timed out after 1")) << r.output;
  EXPECT_TRUE(contains(r.output, "missing: 1")) << r.output;
  EXPECT_TRUE(contains(r.output, "--rdzv-timeout")) << r.output;
  EXPECT_TRUE(pidsIn(dir / "pids").empty());  // no worker was started
}

TEST(LaunchAgent, master_port_in_use_is_a_clear_error) {
  TempDir dir;
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  int port = ntohs(a.sin_port);
  auto r = runAgent(
      {"--nproc-per-node", "2", "--master-port", std::to_string(port), kWorker, "--pidfile", dir / "pids"},
      dir / "out");
  ::close(fd);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "master port " + std::to_string(port) + " is already in use")) << r.output;
  EXPECT_TRUE(contains(r.output, "--master-port")) << r.output;
  EXPECT_TRUE(pidsIn(dir / "pids").empty());
}

TEST(LaunchAgent, bad_flags_print_the_usage) {
  TempDir dir;
  auto r = runAgent({"--nproc-per-node", "2", "--bogus", kWorker}, dir / "out");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(contains(r.output, "unknown option '--bogus'")) << r.output;
  EXPECT_TRUE(contains(r.output, "usage: lockstep run")) << r.output;
  auto c = runAgent({"--standalone", "--nnodes", "2", kWorker}, dir / "out");
  EXPECT_EQ(c.code, 2) << c.output;
  EXPECT_TRUE(contains(c.output, "usage: lockstep run")) << c.output;
  auto missing = runAgent({"--standalone", "no-such-program-xyz"}, dir / "out");
  EXPECT_EQ(missing.code, 2) << missing.output;
  EXPECT_TRUE(contains(missing.output, "'no-such-program-xyz' was not found on PATH")) << missing.output;
}

TEST(LaunchAgent, log_dir_keeps_per_rank_files) {
  TempDir dir;
  auto r = runAgent({"--nproc-per-node", "2", "--standalone", "--rdzv-id", "job1", "--log-dir", dir / "logs",
                     "--redirects", "1", kWorker, "--pidfile", dir / "pids", "--stdout", "hello"},
                    dir / "out");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_FALSE(contains(r.output, "hello from rank")) << r.output;  // stdout went to the files only
  EXPECT_TRUE(contains(r.output, "rank 1 started")) << r.output;    // stderr still on the console
  EXPECT_EQ(readAll(dir / "logs/job1/attempt_0/0/stdout.log"), "hello from rank 0\n");
  EXPECT_EQ(readAll(dir / "logs/job1/attempt_0/1/stdout.log"), "hello from rank 1\n");
  EXPECT_TRUE(contains(readAll(dir / "logs/job1/attempt_0/1/stderr.log"), "rank 1 started (attempt 0)"));
  EXPECT_NO_SURVIVORS(dir / "pids");
}

TEST(LaunchAgent, two_agents_on_one_host_assign_node_ranks_by_arrival_and_restart_together) {
  TempDir dir;
  std::string port = std::to_string(freePort());
  auto agentArgs = [&](const std::string& out) {
    return std::vector<std::string>{LOCKSTEP_RUN_BIN,
                                    "--nnodes",
                                    "2",
                                    "--nproc-per-node",
                                    "2",
                                    "--rdzv-endpoint",
                                    "127.0.0.1:" + port,
                                    "--rdzv-id",
                                    "pair",
                                    "--max-restarts",
                                    "1",
                                    "--rdzv-timeout",
                                    "20",
                                    "--monitor-interval",
                                    "0.05",
                                    kWorker,
                                    "--pidfile",
                                    dir / "pids",
                                    "--env-out",
                                    dir.path(),
                                    "--fail-rank",
                                    "3",
                                    "--only-attempt",
                                    "0",
                                    "--code",
                                    "7",
                                    "--fail-after-ms",
                                    "200",
                                    "--sleep-ms",
                                    "300"};
  };
  ChildProcess a(agentArgs(dir / "a.out"), dir / "a.out");
  ChildProcess b(agentArgs(dir / "b.out"), dir / "b.out");
  int ca = a.wait(30s);
  int cb = b.wait(30s);
  ASSERT_EQ(ca, 0) << a.output();
  ASSERT_EQ(cb, 0) << b.output();
  for (int rank = 0; rank < 4; ++rank) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      std::string env = readAll(dir / ("env." + std::to_string(rank) + "." + std::to_string(attempt)));
      EXPECT_TRUE(contains(env, "WORLD_SIZE=4\n")) << env;
      EXPECT_TRUE(contains(env, "GROUP_RANK=" + std::to_string(rank / 2) + "\n")) << env;
      EXPECT_EQ(variable(env, "LOCKSTEP_STORE_PORT"), port) << env;
      // Node 0's free port, where PyTorch's rank 0 would host its own store: the same on both nodes.
      EXPECT_EQ(variable(env, "MASTER_PORT"),
                variable(readAll(dir / ("env.0." + std::to_string(attempt))), "MASTER_PORT"));
      EXPECT_NE(variable(env, "MASTER_PORT"), port) << env;
    }
  }
  // Both agents report the same root cause: rank 3 on node 1.
  EXPECT_TRUE(contains(a.output(), "root cause: rank 3")) << a.output();
  EXPECT_TRUE(contains(b.output(), "root cause: rank 3")) << b.output();
  EXPECT_TRUE(contains(a.output(), "exited with code 7")) << a.output();
  EXPECT_NO_SURVIVORS(dir / "pids");
}

// Agents that look at the store only every 4 s (--monitor-interval 4): the node whose worker failed
// stops beating once it has published the failure, and the master, looking seconds later, took
// that silence for a lost node (a false root cause, exit 143 there and 7 on the other).
TEST(LaunchAgent, a_long_monitor_interval_still_names_the_failed_rank_on_every_node) {
  TempDir dir;
  std::string port = std::to_string(freePort());
  auto agentArgs = [&](int node) {
    return std::vector<std::string>{LOCKSTEP_RUN_BIN,
                                    "--nnodes",
                                    "2",
                                    "--node-rank",
                                    std::to_string(node),
                                    "--nproc-per-node",
                                    "1",
                                    "--master-port",
                                    port,
                                    "--rdzv-id",
                                    "slow",
                                    "--monitor-interval",
                                    "4",
                                    kWorker,
                                    "--pidfile",
                                    dir / "pids",
                                    "--fail-rank",
                                    "1",
                                    "--code",
                                    "7",
                                    "--fail-after-ms",
                                    "500",
                                    "--sleep-ms",
                                    "30000"};
  };
  ChildProcess a(agentArgs(0), dir / "a.out");
  ChildProcess b(agentArgs(1), dir / "b.out");
  EXPECT_EQ(a.wait(40s), 7) << a.output();
  EXPECT_EQ(b.wait(40s), 7) << b.output();
  for (ChildProcess* c : {&a, &b}) {
    EXPECT_TRUE(contains(c->output(), "root cause: rank 1")) << c->output();
    EXPECT_TRUE(contains(c->output(), "exited with code 7")) << c->output();
    EXPECT_FALSE(contains(c->output(), "has sent no heartbeat")) << c->output();
  }
  EXPECT_NO_SURVIVORS(dir / "pids");
}

namespace {
// Node `node` of a 2-node job on this host (master port `port`, nproc ranks each of the test
// worker, which writes its pid to `pidfile` and hangs), with the agent flags `extra`.
std::vector<std::string> twoNodeAgent(const std::string& port, int node, int nproc,
                                      const std::vector<std::string>& extra, const std::string& pidfile) {
  std::vector<std::string> args{LOCKSTEP_RUN_BIN,
                                "--nnodes",
                                "2",
                                "--node-rank",
                                std::to_string(node),
                                "--nproc-per-node",
                                std::to_string(nproc),
                                "--master-port",
                                port,
                                "--monitor-interval",
                                "0.05"};
  args.insert(args.end(), extra.begin(), extra.end());
  args.insert(args.end(), {kWorker, "--pidfile", pidfile, "--hang"});
  return args;
}
}  // namespace

TEST(LaunchAgent, losing_the_master_agent_stops_the_other_nodes) {
  TempDir dir;
  const std::string port = std::to_string(freePort());
  auto agentArgs = [&](int node) {
    return twoNodeAgent(port, node, 2, {"--rdzv-timeout", "20"}, dir / "pids");
  };
  ChildProcess master(agentArgs(0), dir / "a.out");
  ChildProcess other(agentArgs(1), dir / "b.out");
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (pidsIn(dir / "pids").size() < 4 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  ASSERT_EQ(pidsIn(dir / "pids").size(), 4u) << master.output() << other.output();
  ::kill(master.pid(), SIGKILL);  // its own workers die with it (PR_SET_PDEATHSIG)
  EXPECT_EQ(master.wait(5s), 128 + SIGKILL);
  EXPECT_EQ(other.wait(20s), 143) << other.output();
  EXPECT_TRUE(contains(other.output(), "lost contact with the rendezvous store")) << other.output();
  EXPECT_NO_SURVIVORS(dir / "pids");
}

// The exit codes a cluster's restart policy reads (Kubeflow's ExitCode: 128 and above are retried,
// the rest fail the job; docs/deploy.md): a rank killed by a signal gives 128 + N after the last
// restart, and a signal to one node's agent stops every node with 128 + N.
TEST(LaunchAgent, a_killed_rank_ends_the_job_with_128_plus_its_signal) {
  TempDir dir;
  ChildProcess agent({LOCKSTEP_RUN_BIN, "--nproc-per-node", "2", "--standalone", kWorker, "--pidfile",
                      dir / "pids", "--victim-rank", "1", "--victim-dir", dir.path(), "--hang"},
                     dir / "out");
  ASSERT_TRUE(waitForFile(dir / "victim", 10s)) << agent.output();
  ASSERT_EQ(::kill(static_cast<pid_t>(std::stol(readAll(dir / "victim"))), SIGKILL), 0);
  EXPECT_EQ(agent.wait(20s), 128 + SIGKILL) << agent.output();
  EXPECT_TRUE(contains(agent.output(), "was killed by signal SIGKILL (9)")) << agent.output();
  EXPECT_NO_SURVIVORS(dir / "pids");
}

TEST(LaunchAgent, sigterm_to_one_nodes_agent_stops_every_node_with_143) {
  TempDir dir;
  const std::string port = std::to_string(freePort());
  auto agentArgs = [&](int node) {
    return twoNodeAgent(port, node, 1, {"--max-restarts", "3"}, dir / "pids");
  };
  ChildProcess master(agentArgs(0), dir / "a.out");
  ChildProcess other(agentArgs(1), dir / "b.out");
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (pidsIn(dir / "pids").size() < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  ASSERT_EQ(pidsIn(dir / "pids").size(), 2u) << master.output() << other.output();
  ::kill(other.pid(), SIGTERM);  // the kubelet deleting one pod
  EXPECT_EQ(other.wait(15s), 143) << other.output();
  EXPECT_EQ(master.wait(15s), 143) << master.output();  // not 1, which would fail the whole job
  EXPECT_TRUE(contains(master.output(), "was stopped by SIGTERM")) << master.output();
  EXPECT_FALSE(contains(master.output(), "restarting")) << master.output();
  EXPECT_NO_SURVIVORS(dir / "pids");
}

// Real process groups (comm::initProcessGroup, gloo) through the agent's store.
TEST(LaunchAgent, process_groups_rendezvous_through_the_agent_store) {
  TempDir dir;
  auto r = runAgent({"--nproc-per-node", "3", "--standalone", LOCKSTEP_TEST_PG_WORKER}, dir / "out", 60s);
  ASSERT_EQ(r.code, 0) << r.output;
  for (int rank = 0; rank < 3; ++rank)
    EXPECT_TRUE(contains(r.output, "rank " + std::to_string(rank) + " of 3: allreduce ok (attempt 0)"))
        << r.output;
}

TEST(LaunchAgent, the_rank_that_reports_its_error_is_the_root_cause_and_restart_completes) {
  TempDir dir;
  // Rank 1 writes its error file and exits 3; ranks 0 and 2 then fail in barrier() as its
  // connections close, possibly before rank 1 has finished exiting.
  // The workers prefix their keys per attempt (LOCKSTEP_STORE_PREFIX): attempt 1 must not read
  // attempt 0's gloo addresses from the agent's store.
  auto r = runAgent({"--nproc-per-node", "3", "--standalone", "--max-restarts", "1", LOCKSTEP_TEST_PG_WORKER,
                     "--fail-rank", "1", "--attempt-prefix"},
                    dir / "out", 60s);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "root cause: rank 1 (local rank 1")) << r.output;
  EXPECT_TRUE(contains(r.output, "rank 1 gives up on purpose")) << r.output;
  EXPECT_TRUE(contains(r.output, "rank 2 of 3: allreduce ok (attempt 1)")) << r.output;
}

// `lockstep run script.py` and `lockstep run -m module`, as torchrun: each rank runs the interpreter
// on it, with the rank's environment.
TEST(LaunchAgent, python_script_and_module_run_under_the_interpreter) {
  TempDir dir;
  {
    std::ofstream py(dir / "show_rank.py");
    py << "import os, sys\n"
          "open(os.path.join(sys.argv[1], 'rank.' + os.environ['RANK']), 'w').write(sys.argv[2])\n";
  }
  auto r = runAgent({"--nproc-per-node", "2", "--standalone", dir / "show_rank.py", dir.path(), "script"},
                    dir / "out");
  ASSERT_EQ(r.code, 0) << r.output;
  for (int rank = 0; rank < 2; ++rank) EXPECT_EQ(readAll(dir / ("rank." + std::to_string(rank))), "script");
  ::setenv("PYTHONPATH", dir.path().c_str(), 1);
  r = runAgent({"--nproc-per-node", "2", "--standalone", "-m", "show_rank", dir.path(), "module"},
               dir / "out2");
  ::unsetenv("PYTHONPATH");
  ASSERT_EQ(r.code, 0) << r.output;
  for (int rank = 0; rank < 2; ++rank) EXPECT_EQ(readAll(dir / ("rank." + std::to_string(rank))), "module");
  // --no-python runs the script itself: without an executable bit that is an error naming it
  r = runAgent({"--standalone", "--no-python", dir / "show_rank.py", dir.path(), "x"}, dir / "out3");
  EXPECT_NE(r.code, 0);
  EXPECT_TRUE(contains(r.output, "show_rank.py")) << r.output;
}

// --nnodes 1:2 on one host: the first agent starts the job alone once the last call has passed; a
// second agent that comes while it runs is admitted: the first agent stops its workers, both form
// round 1 with world size 2 (no restart counted: --max-restarts is 0), and the job ends 0 there.
TEST(LaunchAgent, elastic_job_admits_a_node_that_comes_while_it_runs) {
  TempDir dir;
  const std::string port = std::to_string(freePort());
  auto agentArgs = [&] {
    // Round 0 would outlast the test: only its end for round 1 ends it.
    return std::vector<std::string>{LOCKSTEP_RUN_BIN,
                                    "--nnodes",
                                    "1:2",
                                    "--rdzv-endpoint",
                                    "127.0.0.1:" + port,
                                    "--rdzv-id",
                                    "grow",
                                    "--rdzv-conf",
                                    "last_call_timeout=0.3",
                                    "--monitor-interval",
                                    "0.05",
                                    kWorker,
                                    "--pidfile",
                                    dir / "pids",
                                    "--env-out",
                                    dir.path(),
                                    "--sleep-ms",
                                    "300",
                                    "--hang-in-attempt",
                                    "0"};
  };
  ChildProcess a(agentArgs(), dir / "a.out");
  ASSERT_TRUE(waitForFile(dir / "env.0.0", 20s)) << a.output();
  ChildProcess b(agentArgs(), dir / "b.out");
  ASSERT_EQ(b.wait(30s), 0) << b.output() << a.output();
  ASSERT_EQ(a.wait(30s), 0) << a.output();
  EXPECT_EQ(variable(readAll(dir / "env.0.0"), "WORLD_SIZE"), "1");
  for (int rank = 0; rank < 2; ++rank) {
    const std::string env = readAll(dir / ("env." + std::to_string(rank) + ".1"));
    EXPECT_EQ(variable(env, "WORLD_SIZE"), "2") << env;
    EXPECT_EQ(variable(env, "LOCKSTEP_RESTART_COUNT"), "1") << env;
    EXPECT_EQ(variable(env, "TORCHELASTIC_RESTART_COUNT"), "0") << env;  // torchrun's: failures only
    EXPECT_EQ(variable(env, "GROUP_WORLD_SIZE"), "2") << env;
  }
  EXPECT_TRUE(contains(a.output(), "round 0: 1 node (of 1:2), world size 1")) << a.output();
  EXPECT_TRUE(contains(a.output(), "re-forming the job: 1 node waits to join")) << a.output();
  EXPECT_TRUE(contains(a.output(), "round 1: 2 nodes (of 1:2), world size 2")) << a.output();
  EXPECT_TRUE(contains(a.output(), "; joined: ")) << a.output();
  EXPECT_TRUE(contains(b.output(), "this node is node rank 1; this node joins the job")) << b.output();
  EXPECT_NO_SURVIVORS(dir / "pids");
}
