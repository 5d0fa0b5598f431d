// A PyTorch DDP script (helpers/ddp_train.py: env://, gloo, DistributedSampler, DDP) under the
// built `lockstep run` and under torchrun (`python3 -m torch.distributed.run` of Debian's
// python3-torch): the same losses at every step, a restart after a crash, @record's root cause.
// Skipped, saying why, when LOCKSTEP_TEST_PYTHON cannot import torch.
#include <gtest/gtest.h>

#include <cstdlib>
#include <regex>

#include "netns_lab.h"
#include "process_harness.h"

using namespace lockstep::launch::testing;
using namespace std::chrono_literals;

namespace {

const std::string kPython = LOCKSTEP_TEST_PYTHON;
const std::string kScript = std::string(LOCKSTEP_LAUNCH_HELPERS) + "/ddp_train.py";

// Why the tests cannot run here ("" when they can).
const std::string& torchMissing() {
  static const std::string why = [] {
    std::string cmd = "'" + kPython + "' -c 'import torch.distributed' >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return std::string();
    return kPython +
           " cannot import torch.distributed (install python3-torch, or configure with "
           "-DLOCKSTEP_TEST_PYTHON=<a python with torch>)";
  }();
  return why;
}

#define SKIP_WITHOUT_TORCH() \
  if (!torchMissing().empty()) GTEST_SKIP() << "PyTorch test skipped: " << torchMissing()

// The agents this process starts run the workers' scripts with the Python that has torch.
void useTestPython() { ::setenv("LOCKSTEP_PYTHON", kPython.c_str(), 1); }

// `lockstep run ARGS` on this host.
RunResult lockstepRun(const std::vector<std::string>& args, const TempDir& dir) {
  useTestPython();
  return runAgent(args, dir / "lockstep.out", 60s);
}

// "step N loss X" lines in order, whatever prefix the launcher put before them.
std::vector<std::string> losses(const std::string& output) {
  static const std::regex kStep(R"((^|[\]:] ?)(step [0-9]+ loss \S+)$)");
  std::vector<std::string> out;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, kStep)) out.push_back(m[2]);
  }
  return out;
}

}  // namespace

TEST(PyTorch, ddp_script_under_lockstep_run_matches_torchrun_step_for_step) {
  SKIP_WITHOUT_TORCH();
  TempDir dir;
  auto ours = lockstepRun({"--nproc-per-node", "2", "--standalone", kScript, "--env-out", dir / "ours"}, dir);
  ASSERT_EQ(ours.code, 0) << ours.output;
  // torchrun 1.13 under Python 3.11 cannot map a stream setting of 0 (its Std enum), so each rank
  // is given one explicitly: rank 0's stdout on the console, rank 1's in its log file. Its monitor
  // interval is lockstep's default (torchrun's 5 s would add up to 5 s before it sees the end).
  ChildProcess torchrun({kPython, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
                         "--monitor_interval", "0.1", "--redirects", "1:1", "--tee", "0:1", "--log_dir",
                         dir / "torchrun-logs", kScript, "--env-out", dir / "torchrun"},
                        dir / "torchrun.out");
  ASSERT_EQ(torchrun.wait(60s), 0) << torchrun.output();
  auto expected = losses(torchrun.output());
  ASSERT_EQ(expected.size(), 8u) << torchrun.output();  // 2 epochs of 4 steps
  EXPECT_EQ(losses(ours.output), expected) << ours.output << "\n--- torchrun:\n" << torchrun.output();
  // Rank 1's lines reach the console whole and prefixed.
  EXPECT_TRUE(contains(ours.output, "\n[rank 1] rank 1 of 2: 32 samples per epoch\n") ||
              ours.output.rfind("[rank 1] rank 1 of 2: 32 samples per epoch\n", 0) == 0)
      << ours.output;
  EXPECT_TRUE(contains(ours.output, "rank 0 of 2: 32 samples per epoch\n")) << ours.output;
  // Every variable torchrun gives a worker, lockstep run gives too; the identity ones alike.
  for (const char* rank : {"0", "1"}) {
    const std::string theirs = readAll(dir / "torchrun." + rank), mine = readAll(dir / "ours." + rank);
    std::istringstream lines(theirs);
    for (std::string line; std::getline(lines, line);) {
      const std::string name = line.substr(0, line.find('='));
      EXPECT_TRUE(contains("\n" + mine, "\n" + name + "=")) << name << " is missing under lockstep run";
    }
    for (const char* name : {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                             "GROUP_WORLD_SIZE", "ROLE_NAME", "ROLE_RANK", "ROLE_WORLD_SIZE",
                             "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
                             "TORCHELASTIC_USE_AGENT_STORE", "OMP_NUM_THREADS", "NCCL_ASYNC_ERROR_HANDLING"})
      EXPECT_EQ(variable(mine, name), variable(theirs, name)) << name << " of rank " << rank;
  }
}

TEST(PyTorch, crash_once_restarts_and_finishes) {
  SKIP_WITHOUT_TORCH();
  TempDir dir;
  auto r = lockstepRun(
      {"--nproc-per-node", "2", "--standalone", "--max-restarts", "1", kScript, "--crash-once-at-step", "2"},
      dir);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "root cause: rank 1")) << r.output;
  EXPECT_TRUE(contains(r.output, "exited with code 3")) << r.output;
  EXPECT_TRUE(contains(r.output, "restarting the group (restart 1 of 1)")) << r.output;
  auto steps = losses(r.output);
  ASSERT_FALSE(steps.empty()) << r.output;
  EXPECT_EQ(steps.back().substr(0, 7), "step 7 ") << r.output;  // the second attempt trained to the end
}

TEST(PyTorch, record_shows_the_exception_and_traceback_as_root_cause) {
  SKIP_WITHOUT_TORCH();
  TempDir dir;
  auto r = lockstepRun({"--nproc-per-node", "2", "--standalone", kScript, "--raise-at-step", "2"}, dir);
  ASSERT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "root cause: rank 1 (local rank 1")) << r.output;
  EXPECT_TRUE(contains(r.output, "\n  ValueError: bad batch at step 2 on rank 1\n  traceback (error file "))
      << r.output;
  EXPECT_TRUE(contains(r.output, "    Traceback (most recent call last):\n")) << r.output;
  EXPECT_TRUE(contains(r.output, "raise ValueError(f\"bad batch at step {step} on rank {rank}\")"))
      << r.output;
  EXPECT_FALSE(contains(r.output, "py_callstack")) << r.output;  // read, not dumped as JSON
}

TEST(PyTorch, rank_that_cannot_reach_rank_0s_store_is_named_within_the_rendezvous_timeout) {
  SKIP_WITHOUT_TORCH();
  TempDir dir;
  auto start = std::chrono::steady_clock::now();
  auto r = lockstepRun(
      {"--nproc-per-node", "2", "--standalone", "--rdzv-timeout", "3", kScript, "--unreachable-rank", "1"},
      dir);
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(r.code, 143) << r.output;
  EXPECT_TRUE(contains(r.output, "root cause: rank 1 (local rank 1")) << r.output;
  EXPECT_TRUE(contains(r.output, "has not connected to the workers' store at 127.0.0.1:")) << r.output;
  EXPECT_FALSE(contains(r.output, "root cause: rank 0")) << r.output;
  EXPECT_LT(took, 30s) << "PyTorch's own client would retry for 30 minutes";
}

// Two hosts (network namespaces, one rank each) rendezvous by arrival: rank 0's store is reached
// across the bridge at node 0's address, and the losses are those of one host with two ranks.
TEST(PyTorch, ddp_script_across_two_hosts_matches_one_host) {
  SKIP_WITHOUT_TORCH();
  NetnsLab lab(2);
  SKIP_WITHOUT(lab);
  TempDir dir;
  auto one_host = lockstepRun({"--nproc-per-node", "2", "--standalone", kScript}, dir);
  ASSERT_EQ(one_host.code, 0) << one_host.output;
  // The namespaces share this machine's host name, which resolves to a loopback address: PyTorch's
  // gloo would offer its peers that, so it is told the interface, as on real hosts named that way.
  ::setenv("GLOO_SOCKET_IFNAME", "eth0", 1);
  struct Unset {
    ~Unset() { ::unsetenv("GLOO_SOCKET_IFNAME"); }
  } unset;
  std::vector<std::unique_ptr<ChildProcess>> agents;
  for (int i = 0; i < 2; ++i) {
    agents.push_back(std::make_unique<ChildProcess>(
        lab.agent(i, {"--nnodes", "2", "--nproc-per-node", "1", "--rdzv-endpoint", lab.address(0) + ":29410",
                      "--rdzv-id", "pt", "--rdzv-timeout", "20", kScript}),
        dir / ("host" + std::to_string(i))));
  }
  std::vector<std::string> steps;
  for (auto& a : agents) {
    ASSERT_EQ(a->wait(60s), 0) << a->output();
    for (const auto& s : losses(a->output())) steps.push_back(s);  // rank 0's host prints them
  }
  EXPECT_EQ(steps, losses(one_host.output));
}

TEST(PyTorch, rank_on_another_host_that_cannot_reach_rank_0s_store_is_named_on_every_host) {
  SKIP_WITHOUT_TORCH();
  NetnsLab lab(2);
  SKIP_WITHOUT(lab);
  TempDir dir;
  useTestPython();
  std::vector<std::unique_ptr<ChildProcess>> agents;
  for (int i = 0; i < 2; ++i) {
    agents.push_back(std::make_unique<ChildProcess>(
        lab.agent(i, {"--nnodes", "2", "--node-rank", std::to_string(i), "--nproc-per-node", "1",
                      "--master-addr", lab.address(0), "--master-port", "29411", "--rdzv-timeout", "3",
                      kScript, "--unreachable-rank", "1"}),
        dir / ("host" + std::to_string(i))));
  }
  for (auto& a : agents) {
    ASSERT_EQ(a->wait(60s), 143) << a->output();
    EXPECT_TRUE(contains(a->output(), "root cause: rank 1 (local rank 0 on host 'node1', node rank 1"))
        << a->output();
    EXPECT_TRUE(contains(a->output(), "has not connected to the workers' store at " + lab.address(0) + ":"))
        << a->output();
  }
}
