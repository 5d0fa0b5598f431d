#pragma once
// Helpers for the launcher's process tests: run the agent binary with a deadline, capture its
// output, and check that no process a test started is still alive.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/free_port.h"

namespace lockstep::launch::testing {

/// Whether text contains what (the tests' checks of an agent's output).
inline bool contains(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

/// The value of NAME in the "NAME=VALUE" lines a test worker wrote (--env-out); "" when absent.
inline std::string variable(const std::string& env_lines, const std::string& name) {
  auto at = env_lines.find(name + "=");
  while (at != std::string::npos && at != 0 && env_lines[at - 1] != '\n')
    at = env_lines.find(name + "=", at + 1);
  if (at == std::string::npos) return "";
  at += name.size() + 1;
  return env_lines.substr(at, env_lines.find('\n', at) - at);
}

/// A fresh directory under /tmp, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string t = "/tmp/lockstep-launch-test-XXXXXX";
    path_ = ::mkdtemp(t.data()) ? t : "";
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::string readAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// A child process whose stdout+stderr go to a file.
class ChildProcess {
 public:
  /// Starts argv[0] with argv; `prefix` (e.g. {"ip", "netns", "exec", "ns1"}) is put in front.
  ChildProcess(const std::vector<std::string>& argv, const std::string& output_path) : output_(output_path) {
    std::vector<char*> a;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      int fd = ::open(output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::setpgid(0, 0);
      ::execvp(a[0], a.data());
      ::_exit(127);
    }
  }
  ~ChildProcess() {
    if (!done_) {
      ::killpg(pid_, SIGKILL);
      wait(std::chrono::seconds(5));
    }
  }
  pid_t pid() const { return pid_; }
  /// The exit code (128+N when killed by signal N), or -1 after the deadline (then it is killed).
  int wait(std::chrono::milliseconds deadline) {
    auto end = std::chrono::steady_clock::now() + deadline;
    while (!done_) {
      int status = 0;
      pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        done_ = true;
        code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        break;
      }
      if (std::chrono::steady_clock::now() >= end) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        done_ = true;
        code_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return code_;
  }
  std::string output() const { return readAll(output_); }

 private:
  pid_t pid_ = -1;
  std::string output_;
  bool done_ = false;
  int code_ = -1;
};

/// Runs the agent (`lockstep run ARGS`) to completion; exit code and output.
struct RunResult {
  int code = -1;
  std::string output;
};
#ifdef LOCKSTEP_RUN_BIN
inline RunResult runAgent(const std::vector<std::string>& args, const std::string& output_path,
                          std::chrono::milliseconds deadline = std::chrono::seconds(30)) {
  std::vector<std::string> argv = {LOCKSTEP_RUN_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  ChildProcess p(argv, output_path);
  RunResult r;
  r.code = p.wait(deadline);
  r.output = p.output();
  return r;
}
#endif

/// True when pid names a live (non-zombie) process.
inline bool alive(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  if (!in) return false;
  std::string line;
  std::getline(in, line);
  auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

/// The pids listed one per line in path.
inline std::vector<pid_t> pidsIn(const std::string& path) {
  std::vector<pid_t> out;
  std::ifstream in(path);
  for (long p; in >> p;) out.push_back(static_cast<pid_t>(p));
  return out;
}

/// The pids from path that are still alive (killing them, so a failed test leaves nothing).
inline std::vector<pid_t> survivors(const std::string& pidfile) {
  std::vector<pid_t> out;
  for (pid_t p : pidsIn(pidfile)) {
    if (alive(p)) {
      out.push_back(p);
      ::kill(p, SIGKILL);
    }
  }
  return out;
}

/// Waits until path exists (a worker wrote it), up to deadline.
inline bool waitForFile(const std::string& path, std::chrono::milliseconds deadline) {
  auto end = std::chrono::steady_clock::now() + deadline;
  while (!std::filesystem::exists(path)) {
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

using ::lockstep::testing::freePort;  // common/free_port.h

}  // namespace lockstep::launch::testing
