#include "lockstep/launch/orphan_reaper.h"

#include <dirent.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace lockstep::launch {

bool becomeSubreaper() { return ::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0; }

namespace {

// Fast path: /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN) lists each thread's children;
// a re-parented orphan may be attached to any thread of the subreaper, so all are read.
bool childrenFromTasks(pid_t parent, std::vector<pid_t>& out) {
  std::string task_dir = "/proc/" + std::to_string(parent) + "/task";
  DIR* dir = ::opendir(task_dir.c_str());
  if (dir == nullptr) return false;
  bool ok = true;
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    FILE* f = std::fopen((task_dir + "/" + e->d_name + "/children").c_str(), "re");
    if (f == nullptr) {
      ok = false;
      break;
    }
    for (long pid; std::fscanf(f, "%ld", &pid) == 1;) out.push_back(static_cast<pid_t>(pid));
    std::fclose(f);
  }
  ::closedir(dir);
  return ok;
}

}  // namespace

std::vector<pid_t> childrenOf(pid_t parent) {
  std::vector<pid_t> out;
  if (childrenFromTasks(parent, out)) return out;
  out.clear();
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return out;
  while (dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE* f = std::fopen(path, "re");
    if (f == nullptr) continue;
    char buf[512];
    size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[n] = '\0';
    // "pid (comm) state ppid ...": comm may contain spaces and ')', so parse after the last ')'.
    const char* close = std::strrchr(buf, ')');
    if (close == nullptr) continue;
    char state = 0;
    long ppid = 0;
    if (std::sscanf(close + 1, " %c %ld", &state, &ppid) == 2 && ppid == parent) {
      out.push_back(static_cast<pid_t>(pid));
    }
  }
  ::closedir(dir);
  return out;
}

void reapStrays(const std::set<pid_t>& keep) {
  for (;;) {
    siginfo_t info{};
    if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) return;
    if (keep.count(info.si_pid) != 0) {
      // A worker is first in line; reap strays by pid instead so its status stays for poll().
      for (pid_t p : childrenOf(::getpid()))
        if (keep.count(p) == 0) ::waitpid(p, nullptr, WNOHANG);
      return;
    }
    ::waitpid(info.si_pid, nullptr, WNOHANG);
  }
}

int killStrays(const std::set<pid_t>& keep) {
  int killed = 0;
  const pid_t self = ::getpid();
  for (int round = 0; round < 100; ++round) {
    std::vector<pid_t> strays;
    for (pid_t p : childrenOf(self))
      if (keep.count(p) == 0) strays.push_back(p);
    if (strays.empty()) return killed;
    for (pid_t p : strays) {
      ::kill(p, SIGKILL);
      pid_t pgid = ::getpgid(p);
      if (pgid > 0 && pgid != ::getpgrp()) ::killpg(pgid, SIGKILL);
      ++killed;
    }
    for (pid_t p : strays) {
      while (::waitpid(p, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
    // Their children reach us asynchronously after they die; give the kernel a moment.
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return killed;
}

}  // namespace lockstep::launch
