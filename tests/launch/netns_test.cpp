// Multi-host tests: each "host" is a network namespace with its own address on a bridge, and
// runs its own agent through `ip netns exec`. Needs root; skipped with a message otherwise.
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "netns_lab.h"
#include "process_harness.h"

using namespace lockstep::launch::testing;
using namespace std::chrono_literals;

namespace {

const std::string kWorker = LOCKSTEP_TEST_WORKER;

}  // namespace

TEST(LaunchMultiHost, three_hosts_rendezvous_by_arrival) {
  NetnsLab lab(3);
  SKIP_WITHOUT(lab);
  TempDir dir;
  std::vector<std::unique_ptr<ChildProcess>> agents;
  for (int i = 0; i < 3; ++i) {
    agents.push_back(std::make_unique<ChildProcess>(
        lab.agent(i, {"--nnodes", "3", "--nproc-per-node", "2", "--rdzv-endpoint", lab.address(0) + ":29400",
                      "--rdzv-id", "three", "--rdzv-timeout", "20", kWorker, "--pidfile", dir / "pids",
                      "--env-out", dir.path()}),
        dir / ("agent" + std::to_string(i))));
  }
  for (auto& a : agents) EXPECT_EQ(a->wait(30s), 0) << a->output();
  std::set<std::string> groups;
  for (int rank = 0; rank < 6; ++rank) {
    std::string env = readAll(dir / ("env." + std::to_string(rank) + ".0"));
    EXPECT_TRUE(contains(env, "WORLD_SIZE=6\n")) << env;
    EXPECT_EQ(variable(env, "LOCKSTEP_STORE_ADDR"), lab.address(0)) << env;
    EXPECT_EQ(variable(env, "LOCKSTEP_STORE_PORT"), "29400") << env;
    // Node 0's address and a port free there, for PyTorch's rank 0: the same for every rank.
    std::string rank0 = readAll(dir / "env.0.0");
    EXPECT_EQ(variable(env, "MASTER_ADDR"), variable(rank0, "MASTER_ADDR")) << env;
    EXPECT_EQ(variable(env, "MASTER_PORT"), variable(rank0, "MASTER_PORT")) << env;
    EXPECT_NE(variable(env, "MASTER_PORT"), "29400") << env;
    EXPECT_TRUE(contains(env, "GROUP_RANK=" + std::to_string(rank / 2) + "\n")) << env;
  }
  auto left = survivors(dir / "pids");
  EXPECT_EQ(pidsIn(dir / "pids").size(), 6u);
  EXPECT_TRUE(left.empty());
}

TEST(LaunchMultiHost, failure_on_one_host_restarts_every_host) {
  NetnsLab lab(2);
  SKIP_WITHOUT(lab);
  TempDir dir;
  std::vector<std::unique_ptr<ChildProcess>> agents;
  for (int i = 0; i < 2; ++i) {
    agents.push_back(std::make_unique<ChildProcess>(lab.agent(i, {"--nnodes",
                                                                  "2",
                                                                  "--node-rank",
                                                                  std::to_string(i),
                                                                  "--nproc-per-node",
                                                                  "2",
                                                                  "--master-addr",
                                                                  lab.address(0),
                                                                  "--master-port",
                                                                  "29401",
                                                                  "--max-restarts",
                                                                  "1",
                                                                  "--monitor-interval",
                                                                  "0.05",
                                                                  "--rdzv-timeout",
                                                                  "20",
                                                                  kWorker,
                                                                  "--pidfile",
                                                                  dir / "pids",
                                                                  "--env-out",
                                                                  dir.path(),
                                                                  "--fail-rank",
                                                                  "2",
                                                                  "--only-attempt",
                                                                  "0",
                                                                  "--code",
                                                                  "4",
                                                                  "--fail-after-ms",
                                                                  "100",
                                                                  "--sleep-ms",
                                                                  "200"}),
                                                    dir / ("agent" + std::to_string(i))));
  }
  for (auto& a : agents) EXPECT_EQ(a->wait(30s), 0) << a->output();
  // Host 0's agent names the culprit on host 1.
  std::string out0 = agents[0]->output();
  EXPECT_TRUE(contains(out0, "root cause: rank 2 (local rank 0 on host 'node1', node rank 1")) << out0;
  EXPECT_TRUE(contains(out0, "exited with code 4")) << out0;
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_TRUE(
        contains(readAll(dir / ("env." + std::to_string(rank) + ".1")), "LOCKSTEP_RESTART_COUNT=1\n"));
  EXPECT_TRUE(survivors(dir / "pids").empty());
}

TEST(LaunchMultiHost, host_that_never_arrives) {
  NetnsLab lab(2);
  SKIP_WITHOUT(lab);
  TempDir dir;
  ChildProcess a(
      lab.agent(1, {"--nnodes", "2", "--node-rank", "1", "--master-addr", lab.address(0), "--master-port",
                    "29402", "--rdzv-timeout", "1", kWorker, "--pidfile", dir / "pids"}),
      dir / "agent1");
  EXPECT_EQ(a.wait(20s), 143) << a.output();
  EXPECT_TRUE(contains(a.output(), "store at " + lab.address(0) + ":29402 could not be reached"))
      << a.output();
  EXPECT_TRUE(pidsIn(dir / "pids").empty());
}

namespace {

pid_t readPid(const std::string& path) {
  std::ifstream in(path);
  long p = 0;
  in >> p;
  return static_cast<pid_t>(p);
}

double secondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Two hosts, one gloo worker each, allreducing `count` floats in a loop under --timeout SEC.
std::vector<std::unique_ptr<ChildProcess>> loopingJob(const NetnsLab& lab, const TempDir& dir, int port,
                                                      const std::string& timeout, const std::string& count) {
  std::vector<std::unique_ptr<ChildProcess>> agents;
  for (int i = 0; i < 2; ++i) {
    auto argv = lab.agent(i, {"--nnodes",
                              "2",
                              "--node-rank",
                              std::to_string(i),
                              "--master-addr",
                              lab.address(0),
                              "--master-port",
                              std::to_string(port),
                              "--rdzv-timeout",
                              "20",
                              "--timeout",
                              timeout,
                              "--join-token",
                              "netns-test-secret-0123456789",
                              LOCKSTEP_TEST_PG_WORKER,
                              "--backend",
                              "gloo",
                              "--loop-seconds",
                              "60",
                              "--count",
                              count,
                              "--pid-dir",
                              dir.path()});
    // gloo listens on the address the host's name resolves to: give it the namespace's own.
    argv.insert(argv.begin() + 6, "LOCKSTEP_GLOO_HOSTNAME=" + lab.address(i));
    agents.push_back(std::make_unique<ChildProcess>(argv, dir / ("agent" + std::to_string(i))));
  }
  return agents;
}

}  // namespace

// A cut link between the hosts: both agents end their workers and exit non-zero within the
// timeout plus a few seconds; the master's names the silent node, the other the lost master.
TEST(LaunchMultiHost, cut_link_ends_every_node_naming_the_lost_one) {
  NetnsLab lab(2);
  SKIP_WITHOUT(lab);
  TempDir dir;
  auto agents = loopingJob(lab, dir, 29403, "4", "1000");
  ASSERT_TRUE(waitForFile(dir / "pid.0", 30s) && waitForFile(dir / "pid.1", 30s)) << agents[0]->output();
  std::this_thread::sleep_for(500ms);
  ASSERT_TRUE(lab.cut(1));
  auto t0 = std::chrono::steady_clock::now();
  std::vector<double> took(2, -1);  // each agent's own exit (a zombie is not alive)
  while ((took[0] < 0 || took[1] < 0) && secondsSince(t0) < 14.0) {
    for (size_t i = 0; i < 2; ++i)
      if (took[i] < 0 && !alive(agents[i]->pid())) took[i] = secondsSince(t0);
    std::this_thread::sleep_for(20ms);
  }
  for (auto& a : agents) EXPECT_EQ(a->wait(10s), 143) << a->output();
  for (auto& t : took)
    if (t < 0) t = 99;
  EXPECT_LT(took[0], 14.0) << agents[0]->output();
  EXPECT_LT(took[1], 14.0) << agents[1]->output();
  std::string out0 = agents[0]->output(), out1 = agents[1]->output();
  EXPECT_TRUE(contains(out0, "node rank 1 on host 'node1' (rank 1) has sent no heartbeat")) << out0;
  EXPECT_TRUE(contains(out1, "lost contact with the rendezvous store of the master node")) << out1;
  for (int r = 0; r < 2; ++r) EXPECT_FALSE(alive(readPid(dir / ("pid." + std::to_string(r))))) << r;
  std::printf("[ measured ] cut link, timeout 4 s: master node exited after %.1f s, the other after %.1f s\n",
              took[0], took[1]);
}

// kill -9 of a rank during a large gloo allreduce: its peer on the other host only sees a broken
// connection, but every agent reports the killed rank.
TEST(LaunchMultiHost, kill_mid_exchange_names_the_killed_rank_on_every_node) {
  NetnsLab lab(2);
  SKIP_WITHOUT(lab);
  TempDir dir;
  auto agents = loopingJob(lab, dir, 29404, "20", "4000000");
  ASSERT_TRUE(waitForFile(dir / "pid.0", 30s) && waitForFile(dir / "pid.1", 30s)) << agents[0]->output();
  std::this_thread::sleep_for(500ms);
  ASSERT_EQ(::kill(readPid(dir / "pid.1"), SIGKILL), 0);
  for (auto& a : agents) {
    EXPECT_EQ(a->wait(20s), 128 + SIGKILL) << a->output();  // every node: the killed rank's code
    std::string out = a->output();
    auto at = out.rfind("[lockstep run] job failed");
    ASSERT_NE(at, std::string::npos) << out;
    std::string report = out.substr(at);
    EXPECT_TRUE(contains(report, "root cause: rank 1 (local rank 0 on host 'node1'")) << out;
    EXPECT_TRUE(contains(report, "SIGKILL")) << out;
  }
}
