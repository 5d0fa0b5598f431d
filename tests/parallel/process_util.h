#pragma once
// Real processes for the parallel tests: ranks spawned with a launcher's variables, waited for
// with a deadline, and their logs read back.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/free_port.h"

extern char** environ;

namespace lockstep::test {

struct Rank {
  pid_t pid = -1;
  std::string log;
};

using ::lockstep::testing::freePort;  // common/free_port.h

// argv[0] started with this process's environment plus `vars` (which win), stdout and stderr to
// `log`. Every variable a launcher sets is removed first, so the test's own environment (a CTest
// run under mpirun, say) cannot leak into the rank.
inline Rank spawnWithEnv(const std::vector<std::string>& argv, const std::map<std::string, std::string>& vars,
                         const std::string& log) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    std::string name = kv.substr(0, kv.find('='));
    bool launcher = name == "RANK" || name == "WORLD_SIZE" || name.rfind("OMPI_", 0) == 0 ||
                    name.rfind("PMI_", 0) == 0 || name.rfind("SLURM_", 0) == 0 || vars.count(name);
    if (!launcher) env.push_back(kv);
  }
  for (const auto& [k, v] : vars) env.push_back(k + "=" + v);
  std::vector<char*> a, e;
  for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  for (const auto& s : env) e.push_back(const_cast<char*>(s.c_str()));
  e.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  Rank r;
  r.log = log;
  EXPECT_EQ(posix_spawn(&r.pid, a[0], &fa, nullptr, a.data(), e.data()), 0);
  posix_spawn_file_actions_destroy(&fa);
  return r;
}

// A rank as torchrun starts it (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...).
inline Rank spawnRank(const std::vector<std::string>& argv, int rank, int world, int port,
                      const std::string& log) {
  return spawnWithEnv(argv,
                      {{"RANK", std::to_string(rank)},
                       {"LOCAL_RANK", std::to_string(rank)},
                       {"WORLD_SIZE", std::to_string(world)},
                       {"LOCAL_WORLD_SIZE", std::to_string(world)},
                       {"MASTER_ADDR", "127.0.0.1"},
                       {"MASTER_PORT", std::to_string(port)},
                       {"OMP_NUM_THREADS", "1"}},
                      log);
}

// Exit status, or -1 if it did not exit within the deadline (then it is killed).
inline int waitFor(pid_t pid, std::chrono::seconds deadline) {
  auto end = std::chrono::steady_clock::now() + deadline;
  int status = 0;
  while (std::chrono::steady_clock::now() < end) {
    pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return -1;
}

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The number after `key=` in text (the first occurrence from `from`), or -1.
inline double valueAfter(const std::string& text, const std::string& key, size_t from = 0) {
  size_t at = text.find(key + "=", from);
  return at == std::string::npos ? -1 : std::atof(text.c_str() + at + key.size() + 1);
}

}  // namespace lockstep::test
