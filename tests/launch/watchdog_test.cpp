// The agent's watchdog and join token with real processes: a stopped rank, and ranks stuck inside a
// collective past its timeout, are named and the job ends within the timeout on shm and gloo; a store client
// without the token cannot claim a node.
#include "lockstep/launch/watchdog.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "lockstep/comm/store/tcp_store.h"
#include "lockstep/util/error.h"
#include "process_harness.h"

using namespace lockstep::launch::testing;
using namespace std::chrono_literals;

namespace {

const std::string kPgWorker = LOCKSTEP_TEST_PG_WORKER;

pid_t readPid(const std::string& path) {
  std::ifstream in(path);
  long p = 0;
  in >> p;
  return static_cast<pid_t>(p);
}

std::vector<std::string> agentArgv(const std::vector<std::string>& args) {
  std::vector<std::string> a = {LOCKSTEP_RUN_BIN};
  a.insert(a.end(), args.begin(), args.end());
  return a;
}

double secondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

TEST(Watchdog, process_state_reads_proc) {
  EXPECT_NE(lockstep::launch::processState(::getpid()), '?');
  EXPECT_EQ(lockstep::launch::processState(999999999), '?');
}

class StoppedRank : public ::testing::TestWithParam<std::string> {};

// kill -STOP of one rank mid-training: the agent names it and ends every rank within the
// timeout plus a few seconds (here a 3 s timeout).
TEST_P(StoppedRank, is_named_and_the_job_ends_within_the_timeout) {
  TempDir dir;
  ChildProcess agent(agentArgv({"--nproc-per-node", "3", "--standalone", "--timeout", "3", kPgWorker,
                                "--backend", GetParam(), "--loop-seconds", "60", "--pid-dir", dir.path()}),
                     dir / "out");
  ASSERT_TRUE(waitForFile(dir / "pid.1", 30s)) << agent.output();
  std::this_thread::sleep_for(300ms);
  pid_t victim = readPid(dir / "pid.1");
  ASSERT_GT(victim, 0);
  ASSERT_EQ(::kill(victim, SIGSTOP), 0);
  auto t0 = std::chrono::steady_clock::now();
  int code = agent.wait(3s + 10s);
  double took = secondsSince(t0);
  std::string out = agent.output();
  EXPECT_EQ(code, 143) << out;  // timed out: retryable
  EXPECT_LT(took, 13.0) << out;
  EXPECT_TRUE(contains(out, "root cause: rank 1 (local rank 1")) << out;
  EXPECT_TRUE(contains(out, "has been stopped (SIGSTOP")) << out;
  for (int r = 0; r < 3; ++r) EXPECT_FALSE(alive(readPid(dir / ("pid." + std::to_string(r))))) << r;
  std::printf("[ measured ] %s: stopped rank -> every rank ended in %.1f s (timeout 3 s)\n",
              GetParam().c_str(), took);
}

INSTANTIATE_TEST_SUITE_P(Backends, StoppedRank, ::testing::Values("shm", "gloo"),
                         [](const auto& info) { return info.param; });

class StuckRank : public ::testing::TestWithParam<std::string> {};

// Every rank stuck inside collective #20, ignoring its deadline (LOCKSTEP_TEST_HANG_AT_OP, as a
// backend bug would): no rank fails by itself, so without the agent's op watch the job would wait
// forever. The agent names each rank and the op, and ends the job within the op's timeout plus the
// watchdog's 5 s grace.
TEST_P(StuckRank, inside_a_collective_past_its_timeout_is_named_and_the_job_ends) {
  TempDir dir;
  ::setenv("LOCKSTEP_TEST_HANG_AT_OP", "20", 1);  // inherited by the agent and its workers
  auto t0 = std::chrono::steady_clock::now();
  ChildProcess agent(agentArgv({"--nproc-per-node", "2", "--standalone", "--timeout", "2", kPgWorker,
                                "--backend", GetParam(), "--loop-seconds", "120", "--pid-dir", dir.path()}),
                     dir / "out");
  ::unsetenv("LOCKSTEP_TEST_HANG_AT_OP");
  int code = agent.wait(60s);
  double took = secondsSince(t0);
  std::string out = agent.output();
  EXPECT_EQ(code, 143) << out;  // timed out: retryable
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(contains(out, "root cause: rank " + std::to_string(r) + " (local rank")) << out;
    EXPECT_FALSE(alive(readPid(dir / ("pid." + std::to_string(r))))) << r;
  }
  EXPECT_TRUE(contains(out, "has been inside allreduce #20 for ")) << out;
  EXPECT_TRUE(contains(out, "past that op's own timeout of 2.0 s: it is stuck in the backend")) << out;
  // Start-up (rendezvous, 19 allreduces) takes about a second; then 2 s timeout + 5 s grace.
  EXPECT_LT(took, 2.0 + 5.0 + 8.0) << out;
  std::printf(
      "[ measured ] %s: ranks stuck in a collective -> job ended %.1f s after start (timeout 2 s, "
      "grace 5 s)\n",
      GetParam().c_str(), took);
}

INSTANTIATE_TEST_SUITE_P(Backends, StuckRank, ::testing::Values("shm", "gloo"),
                         [](const auto& info) { return info.param; });

// Two agents on this host as node ranks 0 and 1 with a join token: a client without it cannot
// take node rank 1 (nor count itself in), and the real node 1 then joins and the job succeeds.
TEST(JoinToken, client_without_the_token_cannot_claim_a_node_rank) {
  TempDir dir;
  const int port = freePort();
  const std::string token = "a-job-secret-of-enough-length";
  auto node = [&](int rank) {
    return agentArgv({"--nnodes", "2", "--node-rank", std::to_string(rank), "--master-port",
                      std::to_string(port), "--rdzv-id", "tok", "--join-token", token, "--rdzv-timeout", "20",
                      kPgWorker});
  };
  ChildProcess master(node(0), dir / "out0");
  lockstep::comm::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(port);
  so.timeout = 10s;
  auto rogue = std::make_unique<lockstep::comm::TCPStore>(so);  // connects; proves nothing
  std::vector<uint8_t> claim = {'1', '\n', 'r', 'o', 'g', 'u', 'e', '\n'};
  EXPECT_THROW(rogue->compareSet("lockstep/run/tok/round0/node/1", {}, claim), lockstep::ValueError);
  EXPECT_THROW(rogue->add("lockstep/run/tok/round0/left", 5), lockstep::ValueError);
  so.join_token = "a-wrong-secret-of-enough-length";
  EXPECT_THROW(lockstep::comm::TCPStore{so}, lockstep::ValueError);
  ChildProcess worker(node(1), dir / "out1");
  EXPECT_EQ(worker.wait(30s), 0) << worker.output();
  EXPECT_EQ(master.wait(30s), 0) << master.output();
  EXPECT_TRUE(contains(master.output(), "refused client")) << master.output();
  EXPECT_TRUE(contains(worker.output(), "rank 1 of 2: allreduce ok")) << worker.output();
}

// A worker under the agent gets the token the agent generated (--standalone) and a timeout.
TEST(JoinToken, standalone_hands_a_fresh_token_and_the_timeout_to_its_workers) {
  TempDir dir;
  auto r = runAgent({"--nproc-per-node", "2", "--standalone", "--timeout", "7", LOCKSTEP_TEST_WORKER,
                     "--env-out", dir.path()},
                    dir / "out");
  ASSERT_EQ(r.code, 0) << r.output;
  std::string env = readAll(dir / "env.0.0");
  EXPECT_TRUE(contains(env, "LOCKSTEP_TIMEOUT=7\n")) << env;
  auto at = env.find("LOCKSTEP_JOIN_TOKEN=");
  ASSERT_NE(at, std::string::npos) << env;
  EXPECT_EQ(env.find('\n', at) - at - std::string("LOCKSTEP_JOIN_TOKEN=").size(), 64u) << env;
}
