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
