#pragma once
// `lockstep train` run as a user runs it: the built binary, a scratch directory per test, and a
// small synthetic config that trains in a second.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "lockstep/train/checkpoint/safetensors.h"

#ifndef LOCKSTEP_BIN
#error "LOCKSTEP_BIN must name the built lockstep binary"
#endif

namespace fs = std::filesystem;

namespace lockstep::test {

struct Result {
  int code = -1;
  std::string output;
};

inline std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// `lockstep ARGS` (any subcommand), its exit code and output (kept in dir/cmd.txt).
inline Result runLockstep(const std::string& dir, const std::string& args) {
  const std::string out = dir + "/cmd.txt";
  int status = std::system((std::string(LOCKSTEP_BIN) + " " + args + " > " + out + " 2>&1").c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, readFile(out)};
}

// The steps of metrics.csv's rows of `metric` (e.g. "val/loss") in DIR, in file order.
inline std::vector<int64_t> metricSteps(const std::string& dir, const std::string& metric) {
  std::vector<int64_t> steps;
  std::istringstream csv(readFile(dir + "/metrics.csv"));
  for (std::string line; std::getline(csv, line);) {
    std::istringstream row(line);
    std::string epoch, step, name;
    std::getline(row, epoch, ',');
    std::getline(row, step, ',');
    std::getline(row, name, ',');
    if (name == metric) steps.push_back(std::stoll(step));
  }
  return steps;
}

// max |a - b| / max |b| over the tensors of safetensors file b (each must be in a, as large).
inline double safetensorsRelDiff(const std::string& a, const std::string& b) {
  auto fa = lockstep::train::loadSafetensors(a), fb = lockstep::train::loadSafetensors(b);
  double d = 0, m = 0;
  for (const auto& [name, t] : fb.tensors) {
    auto va = fa.at(name).toVector<double>(), vb = t.toVector<double>();
    EXPECT_EQ(va.size(), vb.size()) << name;
    for (size_t i = 0; i < va.size() && i < vb.size(); ++i) {
      d = std::max(d, std::abs(va[i] - vb[i]));
      m = std::max(m, std::abs(vb[i]));
    }
  }
  return d / m;
}

class TrainCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("lockstep-train-" + std::to_string(::getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string writeConfig(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  Result run(const std::string& args) {
    std::string out = dir_ + "/out.txt";
    int status = std::system((std::string(LOCKSTEP_BIN) + " train " + args + " > " + out + " 2>&1").c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, readFile(out)};
  }
  std::string dir_;
};

inline const char* kSynthetic = R"(
model: {name: mlp, hidden: [8]}
data: {dataset: synthetic, size: 96, test_size: 32, input_shape: [6], num_classes: 3}
train_micro_batch_size_per_gpu: 8
gradient_accumulation_steps: 2
optimizer: {type: Adam, params: {lr: 0.01}}
scheduler: {type: WarmupLR, params: {warmup_num_steps: 5, warmup_max_lr: 0.01}}
gradient_clipping: 1.0
epochs: 4
max_steps: 20
steps_per_print: 3
checkpoint: {every_steps: 4, keep_last: 3}
tensorboard: {enabled: true}
)";

}  // namespace lockstep::test
