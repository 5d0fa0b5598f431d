// A node whose network is cut, as a cluster loses one (a switch port, a host's link, a network
// partition): nothing answers and nothing is refused, so no connection breaks. With the defaults
// (no --timeout, no --heartbeat-timeout) every surviving agent ends the job within a minute, with
// the code a cluster retries (143), naming the lost node, and the master node, which keeps the
// rendezvous store, is no exception. Each "host" is a network namespace on a bridge (needs root;
// skipped with the reason otherwise); `lockstep run` + `lockstep train` on each, as on a cluster.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "launch/netns_lab.h"
#include "launch/process_harness.h"
#include "train/train_cli.h"

using namespace lockstep::test;
using namespace std::chrono_literals;
using lockstep::launch::testing::alive;
using lockstep::launch::testing::ChildProcess;
using lockstep::launch::testing::contains;
using lockstep::launch::testing::NetnsLab;
using lockstep::launch::testing::waitForFile;

namespace {

// A small model trained over gloo for far longer than the test lasts, a checkpoint every 5 steps
// (the sign that every node trains).
constexpr const char* kLongJob = R"(
model: {name: mlp, hidden: [16]}
data: {dataset: synthetic, size: 960, test_size: 32, input_shape: [6], num_classes: 3}
train_micro_batch_size_per_gpu: 8
optimizer: {type: Adam, params: {lr: 0.01}}
epochs: 100000
backend: gloo
checkpoint: {every_steps: 5, keep_last: 2}
)";

class TrainMultiHost : public TrainCli {};

double secondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

// Two 3-node jobs side by side on one bridge: in job "a" a worker node (node rank 2) is cut off,
// in job "b" the master node (node rank 0, the store's host).
TEST_F(TrainMultiHost, cut_node_ends_the_job_on_every_other_node_within_a_minute_naming_it) {
  NetnsLab lab(6);
  SKIP_WITHOUT(lab);
  const std::string cfg = writeConfig("c.yaml", kLongJob);
  std::vector<std::unique_ptr<ChildProcess>> agents;
  for (int h = 0; h < 6; ++h) {
    const std::string job = h < 3 ? "a" : "b";
    const int node = h % 3, master = h - node;
    const std::string name = job + std::to_string(node);
    agents.push_back(std::make_unique<ChildProcess>(lab.exec(h, {"env",
                                                                 "LOCKSTEP_HOSTNAME=" + name,
                                                                 "LOCKSTEP_GLOO_HOSTNAME=" + lab.address(h),
                                                                 LOCKSTEP_BIN,
                                                                 "run",
                                                                 "--nnodes",
                                                                 "3",
                                                                 "--node-rank",
                                                                 std::to_string(node),
                                                                 "--master-addr",
                                                                 lab.address(master),
                                                                 "--master-port",
                                                                 "29420",
                                                                 "--rdzv-timeout",
                                                                 "30",
                                                                 "--join-token",
                                                                 "netns-cut-node-secret-0123",
                                                                 LOCKSTEP_BIN,
                                                                 "train",
                                                                 cfg,
                                                                 "--output-dir",
                                                                 dir_ + "/" + job}),
                                                    dir_ + "/agent-" + name));
  }
  for (const std::string job : {"a", "b"}) {
    ASSERT_TRUE(waitForFile(dir_ + "/" + job + "/checkpoints/ckpt-5", 60s))
        << agents[0]->output() << agents[3]->output();
  }
  const int cut_worker = 2, cut_master = 3;
  ASSERT_TRUE(lab.cut(cut_worker));
  ASSERT_TRUE(lab.cut(cut_master));
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<double> took(6, -1);  // each agent's own exit (a zombie is not alive)
  auto running = [&] {
    for (double t : took)
      if (t < 0) return true;
    return false;
  };
  while (running() && secondsSince(t0) < 75.0) {
    for (size_t h = 0; h < 6; ++h)
      if (took[h] < 0 && !alive(agents[h]->pid())) took[h] = secondsSince(t0);
    std::this_thread::sleep_for(50ms);
  }
  for (size_t h = 0; h < 6; ++h) {
    const std::string out = agents[h]->output();
    EXPECT_EQ(agents[h]->wait(10s), 143) << out;
    EXPECT_GE(took[h], 0) << "agent " << h << " still running 75 s after the cut\n" << out;
    EXPECT_LT(took[h], 60.0) << out;
  }
  // Job a: both other nodes name the silent worker node.
  for (int h : {0, 1}) {
    EXPECT_TRUE(contains(agents[h]->output(), "node rank 2 on host 'a2' (rank 2) has sent no heartbeat"))
        << agents[h]->output();
  }
  // Job b: the other nodes name the master they lost; the cut master names both as silent.
  for (int h : {4, 5}) {
    EXPECT_TRUE(
        contains(agents[h]->output(),
                 "lost contact with the rendezvous store of the master node (node rank 0 on host 'b0') at " +
                     lab.address(3) + ":29420"))
        << agents[h]->output();
  }
  std::printf(
      "[ measured ] cut node, default timeouts: job a (worker node cut): master exited after %.1f s, node 1 "
      "after "
      "%.1f s, the cut node after %.1f s; job b (master cut): node 1 after %.1f s, node 2 after %.1f s, the "
      "cut "
      "master after %.1f s\n",
      took[0], took[1], took[2], took[4], took[5], took[3]);
}

namespace {

// Long enough (about 15 s of steps at 2 nodes) for a node to join and another to die on the way,
// a checkpoint every 20 steps, all kept: the one the last round resumes from is compared against.
constexpr const char* kElasticJob = R"(
model: {name: mlp, hidden: [256, 256]}
data: {dataset: synthetic, size: 2048, test_size: 32, input_shape: [128], num_classes: 3}
train_micro_batch_size_per_gpu: 16
optimizer: {type: Adam, params: {lr: 0.001}}
epochs: 12
backend: gloo
checkpoint: {every_steps: 20, keep_last: 1000}
)";

// The step of the checkpoint dir/checkpoints/latest names (-1: none yet): the newest one committed.
// (A ckpt-N directory can be there a moment before `latest` names it: a node lost in that moment
// leaves the job resuming from the one before.)
long newestCheckpoint(const std::string& dir) {
  const std::string latest = readFile(dir + "/checkpoints/latest");
  const size_t dash = latest.find("ckpt-");
  if (dash == std::string::npos) return -1;
  try {
    return std::stol(latest.substr(dash + 5));
  } catch (const std::exception&) {
    return -1;
  }
}

// Waits up to `limit` for pred; false on the deadline.
template <typename Pred>
bool waitFor(Pred pred, std::chrono::seconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(50ms);
  }
  return true;
}

}  // namespace

// torchrun's elastic --nnodes MIN:MAX across three hosts: the job starts with two nodes, a third that
// comes late is admitted (the job re-forms at world size 3 from the checkpoint its stop wrote), then
// that node dies (every process on it killed at once): the survivors re-form at two nodes, resume
// from the newest checkpoint and finish with the model a fresh 2-rank run from that checkpoint gives,
// bitwise. Every round and who joined and left is in the agents' log; nothing is left running.
TEST_F(TrainMultiHost, elastic_job_admits_a_late_node_and_reforms_without_a_dead_one) {
  NetnsLab lab(3);
  SKIP_WITHOUT(lab);
  const std::string cfg = writeConfig("c.yaml", kElasticJob);
  const std::string out = dir_ + "/elastic";
  auto agent = [&](int h) {
    return std::make_unique<ChildProcess>(lab.exec(h, {"env",
                                                       "LOCKSTEP_HOSTNAME=node" + std::to_string(h),
                                                       "LOCKSTEP_GLOO_HOSTNAME=" + lab.address(h),
                                                       LOCKSTEP_BIN,
                                                       "run",
                                                       "--nnodes",
                                                       "2:3",
                                                       "--rdzv-endpoint",
                                                       lab.address(0) + ":29430",
                                                       "--rdzv-id",
                                                       "elastic",
                                                       "--rdzv-conf",
                                                       "last_call_timeout=1",
                                                       "--max-restarts",
                                                       "3",
                                                       "--join-token",
                                                       "netns-elastic-secret-01234",
                                                       LOCKSTEP_BIN,
                                                       "train",
                                                       cfg,
                                                       "--output-dir",
                                                       out}),
                                          dir_ + "/agent-" + std::to_string(h));
  };
  std::vector<std::unique_ptr<ChildProcess>> agents;
  agents.push_back(agent(0));
  agents.push_back(agent(1));
  auto logs = [&] {
    std::string all;
    for (size_t h = 0; h < agents.size(); ++h)
      all += "--- agent " + std::to_string(h) + "\n" + agents[h]->output();
    return all;
  };
  ASSERT_TRUE(waitFor([&] { return newestCheckpoint(out) >= 20; }, 60s)) << logs();
  agents.push_back(agent(2));  // comes late: the job re-forms to admit it
  ASSERT_TRUE(waitFor([&] { return contains(agents[0]->output(), "round 1: 3 nodes"); }, 60s)) << logs();
  const long reformed_at = newestCheckpoint(out);  // the checkpoint the stop for the re-formation wrote
  ASSERT_TRUE(waitFor([&] { return newestCheckpoint(out) > reformed_at; }, 60s)) << logs();
  ASSERT_TRUE(lab.killAll(2));  // the late node dies: agent and worker at once
  EXPECT_EQ(agents[0]->wait(120s), 0) << logs();
  EXPECT_EQ(agents[1]->wait(30s), 0) << logs();
  agents[2]->wait(5s);
  for (int h : {0, 1}) EXPECT_EQ(lab.processCount(h), 0) << "processes left on host " << h;

  const std::string log0 = agents[0]->output(), log1 = agents[1]->output();
  for (const std::string& log : {log0, log1}) {
    EXPECT_TRUE(contains(log, "round 0: 2 nodes (of 2:3), world size 2")) << log;
    EXPECT_TRUE(contains(log, "re-forming the job: 1 node waits to join")) << log;
    EXPECT_TRUE(contains(log, "round 1: 3 nodes (of 2:3), world size 3")) << log;
    EXPECT_TRUE(contains(log, "joined: 'node2'")) << log;
    EXPECT_TRUE(contains(log, "round 2: 2 nodes (of 2:3), world size 2")) << log;
    EXPECT_TRUE(contains(log, "left: 'node2'")) << log;
    EXPECT_TRUE(contains(log, "restart 1 of 3")) << log;  // the loss counts; the admission did not
  }
  // The checkpoint the last round resumed from: the newest one a rank 0 said it resumed from, on
  // whichever node the rendezvous made node rank 0 in that round. Lines quoted in a root cause's
  // stderr tail (indented) are no witness.
  std::string resumed;
  long resumed_step = -1;
  for (const std::string& log : {log0, log1}) {
    std::istringstream lines(log);
    for (std::string line; std::getline(lines, line);) {
      const std::string lead = "resuming from ";
      const size_t step_at = line.find(" (step");
      if (line.rfind(lead, 0) != 0 || step_at == std::string::npos) continue;
      const std::string path = line.substr(lead.size(), step_at - lead.size());
      const long step = std::stol(path.substr(path.rfind('-') + 1));
      if (step > resumed_step) {
        resumed_step = step;
        resumed = path;
      }
    }
  }
  ASSERT_FALSE(resumed.empty()) << log0;
  EXPECT_GT(std::stol(resumed.substr(resumed.rfind('-') + 1)), reformed_at) << resumed << "\n"
                                                                            << log0 << log1;
  // A fresh 2-rank run from that checkpoint ends with the same model, bit for bit.
  Result fresh = run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/fresh --resume-from " + resumed);
  ASSERT_EQ(fresh.code, 0) << fresh.output;
  EXPECT_EQ(safetensorsRelDiff(out + "/model.safetensors", dir_ + "/fresh/model.safetensors"), 0.0);
  std::printf(
      "[ measured ] elastic 2:3: re-formed at 3 nodes from ckpt-%ld, at 2 nodes from %s after the "
      "late node died\n",
      reformed_at, resumed.c_str());
}
