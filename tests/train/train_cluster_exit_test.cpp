// How a job ends, as a cluster reads it (Kubeflow's `restartPolicy: ExitCode` retries a pod that
// exits 128 or more and fails the job on any other code; docs/deploy.md). SIGTERM (the kubelet's,
// on a pod's deletion or a node's drain) to `lockstep train` or to each node's `lockstep run`
// agent ends the job after the step under way, with that step's checkpoint written whole, and exit
// 143 (128 + SIGTERM): retried, and the retry resumes from the checkpoint. A bad config exits 2,
// under the agent too: the job fails instead of being retried forever.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/free_port.h"
#include "lockstep/train/checkpoint/checkpoint.h"
#include "train/train_cli.h"

using namespace lockstep::test;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

// A process started with exactly the environment given (`env` of a pod: nothing inherited), its
// output in a file.
class Process {
 public:
  Process(const std::vector<std::string>& argv, const std::vector<std::string>& env, const std::string& out)
      : out_(out) {
    std::vector<char*> a, e;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    for (const auto& s : env) e.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    e.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::execve(a[0], a.data(), e.data());
      ::_exit(127);
    }
  }
  ~Process() {
    if (code_ < 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  void signal(int sig) const { ::kill(pid_, sig); }
  // The exit code (128 + N for signal N), or -1 past the deadline.
  int wait(std::chrono::milliseconds deadline) {
    const auto end = Clock::now() + deadline;
    while (code_ < 0 && Clock::now() < end) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        break;
      }
      std::this_thread::sleep_for(5ms);
    }
    return code_;
  }
  std::string output() const { return readFile(out_); }

 private:
  pid_t pid_ = -1;
  std::string out_;
  int code_ = -1;
};

bool waitForPath(const std::string& path, std::chrono::milliseconds deadline) {
  const auto end = Clock::now() + deadline;
  while (!fs::exists(path)) {
    if (Clock::now() >= end) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

using ::lockstep::testing::freePort;

// The step N of "stopped by SIGTERM after step N", or -1.
long long stoppedAfter(const std::string& output) {
  const std::string marker = "stopped by SIGTERM after step ";
  const size_t at = output.find(marker);
  return at == std::string::npos ? -1 : std::stoll(output.substr(at + marker.size()));
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// Seed 001's job (the Net CNN on 28x28 images, Adam, StepLR, batch 32 a rank, seed 1) on synthetic
// images, long enough that SIGTERM finds it training, with a checkpoint every 5 steps.
constexpr const char* kSeedJob = R"(
model: mnist_cnn
data: {dataset: synthetic, size: 2048, test_size: 64, input_shape: [1, 28, 28], num_classes: 10}
train_micro_batch_size_per_gpu: 32
optimizer: {type: Adam, params: {lr: 0.002}}
scheduler: {type: StepLR, params: {step_size: 100, gamma: 0.7}}
gradient_clipping: 0
epochs: 10
seed: 1
steps_per_print: 5
checkpoint: {every_steps: 5, keep_last: 3}
)";

}  // namespace

TEST_F(TrainCli, sigterm_stops_training_after_a_step_with_its_checkpoint_and_exit_143) {
  const std::string cfg = writeConfig("c.yaml", kSeedJob);
  const std::string ck = dir_ + "/o/checkpoints";
  Process p({LOCKSTEP_BIN, "train", cfg, "--output-dir", dir_ + "/o"}, {"PATH=/usr/bin:/bin"}, dir_ + "/out");
  ASSERT_TRUE(waitForPath(ck + "/ckpt-5", 60s)) << p.output();
  p.signal(SIGTERM);
  const auto sent = Clock::now();
  ASSERT_EQ(p.wait(30s), 143) << p.output();
  EXPECT_LT(Clock::now() - sent, 10s);
  const long long step = stoppedAfter(p.output());
  ASSERT_GE(step, 5) << p.output();
  EXPECT_EQ(trimmed(readFile(ck + "/latest")), "ckpt-" + std::to_string(step));
  EXPECT_EQ(lockstep::train::verifyCheckpoint(ck + "/ckpt-" + std::to_string(step)).step, step);
  EXPECT_FALSE(fs::exists(dir_ + "/o/model.safetensors"));  // not finished: no final model

  Result resumed =
      run(cfg + " --output-dir " + dir_ + "/o --resume --set max_steps=" + std::to_string(step + 2));
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("(step " + std::to_string(step) + ")"), std::string::npos) << resumed.output;
}

// Two pods of a Kubeflow PyTorchJob on one machine (loopback): each agent sees only what the
// operator sets (PET_*, MASTER_ADDR/MASTER_PORT, RANK, WORLD_SIZE) and runs the manifest's command,
// `lockstep run lockstep train CONFIG --output-dir (the shared volume) --resume`. SIGTERM to both
// agents at once, as the kubelet sends it when the job is deleted: both exit 143 well within the
// pods' 30 s grace period, leaving a whole checkpoint of the last step; the restarted pods resume
// from it and finish with the model an uninterrupted job trains, bit for bit.
TEST_F(TrainCli, pytorchjob_pods_stopped_by_sigterm_checkpoint_and_exit_143) {
  const std::string cfg = writeConfig("c.yaml", kSeedJob);
  const std::string volume = dir_ + "/volume";
  const std::string ck = volume + "/checkpoints";
  auto pods = [&](const std::string& label, const std::string& run_dir,
                  const std::vector<std::string>& extra) {
    const std::string port = std::to_string(freePort());
    std::vector<std::unique_ptr<Process>> out;
    for (int node = 0; node < 2; ++node) {
      std::vector<std::string> argv = {LOCKSTEP_BIN, "run",          LOCKSTEP_BIN, "train",
                                       cfg,          "--output-dir", run_dir};
      argv.insert(argv.end(), extra.begin(), extra.end());
      const std::string n = std::to_string(node);
      out.push_back(std::make_unique<Process>(
          argv,
          std::vector<std::string>{"PATH=/usr/bin:/bin", "PET_NNODES=2", "PET_NODE_RANK=" + n,
                                   "PET_NPROC_PER_NODE=1", "PET_MASTER_ADDR=127.0.0.1",
                                   "PET_MASTER_PORT=" + port, "PET_MAX_RESTARTS=3", "MASTER_ADDR=127.0.0.1",
                                   "MASTER_PORT=" + port, "WORLD_SIZE=2", "RANK=" + n},
          dir_ + "/" + label + "-pod" + n));
    }
    return out;
  };
  {
    auto job = pods("stopped", volume, {"--resume"});
    ASSERT_TRUE(waitForPath(ck + "/ckpt-5", 60s)) << job[0]->output() << job[1]->output();
    for (auto& pod : job) pod->signal(SIGTERM);
    const auto sent = Clock::now();
    for (auto& pod : job) EXPECT_EQ(pod->wait(30s), 143) << pod->output();
    EXPECT_LT(Clock::now() - sent, 30s);
  }
  const std::string job_output = readFile(dir_ + "/stopped-pod0");
  const long long step = stoppedAfter(job_output);
  ASSERT_GE(step, 5) << job_output;
  EXPECT_EQ(trimmed(readFile(ck + "/latest")), "ckpt-" + std::to_string(step));
  EXPECT_EQ(lockstep::train::verifyCheckpoint(ck + "/ckpt-" + std::to_string(step)).step, step);

  // The operator restarts the pods (exit 143 is retryable): they resume and finish.
  const std::string until = "max_steps=" + std::to_string(step + 3);
  {
    auto job = pods("resumed", volume, {"--resume", "--set", until});
    for (auto& pod : job) ASSERT_EQ(pod->wait(60s), 0) << pod->output();
    EXPECT_NE(job[0]->output().find("resuming from " + ck + "/ckpt-" + std::to_string(step)),
              std::string::npos)
        << job[0]->output();
  }
  {
    auto job = pods("whole", dir_ + "/whole", {"--set", until});
    for (auto& pod : job) ASSERT_EQ(pod->wait(60s), 0) << pod->output();
  }
  EXPECT_EQ(readFile(volume + "/model.safetensors"), readFile(dir_ + "/whole/model.safetensors"));
}

// Pods of a job started without an agent (RANK, WORLD_SIZE, MASTER_*) whose peers never start:
// each gives up at the config's comm_timeout_seconds, naming the missing ranks (or rank 0's store)
// and the setting, with the code a cluster retries (their pods may be scheduled next time).
TEST_F(TrainCli, ranks_that_never_start_are_named_at_the_comm_timeout_with_exit_143) {
  const std::string cfg = writeConfig("c.yaml", std::string(kSeedJob) + "comm_timeout_seconds: 1\n");
  Process p({LOCKSTEP_BIN, "train", cfg, "--output-dir", dir_ + "/o"},
            {"PATH=/usr/bin:/bin", "RANK=0", "WORLD_SIZE=3", "MASTER_ADDR=127.0.0.1",
             "MASTER_PORT=" + std::to_string(freePort())},
            dir_ + "/out");
  const auto start = Clock::now();
  ASSERT_EQ(p.wait(20s), 143) << p.output();
  EXPECT_LT(Clock::now() - start, 10s);
  EXPECT_NE(p.output().find("waited 1.0 s for ranks 1, 2 to join the process group"), std::string::npos)
      << p.output();
  EXPECT_NE(p.output().find("comm_timeout_seconds"), std::string::npos) << p.output();

  // Rank 0, the store's host, never started: rank 1 names it at the same timeout.
  Process q({LOCKSTEP_BIN, "train", cfg, "--output-dir", dir_ + "/o"},
            {"PATH=/usr/bin:/bin", "RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
             "MASTER_PORT=" + std::to_string(freePort())},
            dir_ + "/out1");
  ASSERT_EQ(q.wait(20s), 143) << q.output();
  EXPECT_NE(q.output().find("rank 1 of 2 could not reach rank 0's store within 1 s"), std::string::npos)
      << q.output();
}

TEST_F(TrainCli, bad_config_exits_2_alone_and_under_the_agent_after_its_restarts) {
  std::string text = kSeedJob;
  text.replace(text.find("type: Adam"), 10, "type: Adamm");
  const std::string bad = writeConfig("bad.yaml", text);
  Result alone = run(bad + " --output-dir " + dir_ + "/a");
  EXPECT_EQ(alone.code, 2) << alone.output;
  EXPECT_NE(alone.output.find("Adamm"), std::string::npos) << alone.output;
  Result ranks = run(bad + " --nproc-per-node 2 --max-restarts 3 --output-dir " + dir_ + "/b");
  EXPECT_EQ(ranks.code, 2) << ranks.output;
  // A pod's agent with the seed's maxRestarts: 3 restarts within the pod, then the code of the
  // config error, which the operator does not retry.
  const std::string port = std::to_string(freePort());
  Process pod({LOCKSTEP_BIN, "run", LOCKSTEP_BIN, "train", bad, "--output-dir", dir_ + "/c"},
              {"PATH=/usr/bin:/bin", "PET_NPROC_PER_NODE=1", "PET_MAX_RESTARTS=3", "PET_MASTER_PORT=" + port},
              dir_ + "/pod");
  EXPECT_EQ(pod.wait(60s), 2) << pod.output();
  EXPECT_NE(pod.output().find("restart 3 of 3"), std::string::npos) << pod.output();
  EXPECT_NE(pod.output().find("exited with code 2"), std::string::npos) << pod.output();
}
