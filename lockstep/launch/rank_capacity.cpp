#include "lockstep/launch/rank_capacity.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "lockstep/launch/launch_options.h"
#include "lockstep/util/error.h"

namespace lockstep::launch {

namespace {

// The first number in a file ("max" and unreadable files: 0).
int64_t readBytes(const std::string& path) {
  std::ifstream in(path);
  long long v = 0;
  return in >> v ? static_cast<int64_t>(v) : 0;
}

int64_t memAvailable() {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);) {
    long long kib = 0;
    if (std::sscanf(line.c_str(), "MemAvailable: %lld kB", &kib) == 1) return int64_t{kib} << 10;
  }
  return 0;
}

// The memory limit of this process's cgroup (v2: memory.max of its unified path; v1: the memory
// controller's limit_in_bytes), 0 where there is none. A limit, not limit minus usage: v1 counts
// page cache as usage, which the kernel gives back before it kills anything.
int64_t cgroupLimit() {
  std::ifstream in("/proc/self/cgroup");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("0::", 0) == 0) {
      int64_t v2 = readBytes("/sys/fs/cgroup" + line.substr(3) + "/memory.max");
      if (v2 > 0) return v2;
    }
  }
  int64_t v1 = readBytes("/sys/fs/cgroup/memory/memory.limit_in_bytes");
  return v1 > 0 && v1 < (int64_t{1} << 60) ? v1 : 0;  // "no limit" reads as about 2^63
}

std::string humanBytes(int64_t b) {
  char buf[32];
  if (b >= (int64_t{1} << 30)) {
    std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(b) / (1 << 30));
  } else {
    std::snprintf(buf, sizeof buf, "%lld MiB", static_cast<long long>(b >> 20));
  }
  return buf;
}

}  // namespace

MachineCapacity probeMachineCapacity() {
  MachineCapacity m;
  m.cores = availableCores();
  m.memory_bytes = memAvailable();
  m.memory_source = "MemAvailable in /proc/meminfo";
  const int64_t limit = cgroupLimit();
  if (limit > 0 && (m.memory_bytes == 0 || limit < m.memory_bytes)) {
    m.memory_bytes = limit;
    m.memory_source = "this process's cgroup memory limit";
  }
  return m;
}

void checkRanksFit(const std::string& flag, int nproc, const MachineCapacity& machine, bool oversubscribe) {
  if (oversubscribe || nproc <= 1) return;
  const int64_t max_by_cores = int64_t{kMaxRanksPerCore} * std::max(1, machine.cores);
  LOCKSTEP_ENFORCE(nproc <= max_by_cores, ValueError, flag, " ", nproc, " would start more than ",
                   kMaxRanksPerCore, " ranks per core: this process may use ", machine.cores,
                   machine.cores == 1 ? " core" : " cores", " (at most ", max_by_cores,
                   " ranks); give a smaller count (auto starts one per core), or add --oversubscribe to "
                   "start them anyway");
  if (machine.memory_bytes <= 0) return;
  const int64_t max_by_memory = machine.memory_bytes / kMinRankBytes;
  LOCKSTEP_ENFORCE(nproc <= max_by_memory, ValueError, flag, " ", nproc, " ranks need at least ",
                   humanBytes(nproc * kMinRankBytes), " (", humanBytes(kMinRankBytes),
                   " each, before any model or data) but ", humanBytes(machine.memory_bytes),
                   " of memory is available (", machine.memory_source, "); give at most ",
                   std::max<int64_t>(1, max_by_memory),
                   " ranks, or add --oversubscribe to start them anyway");
}

}  // namespace lockstep::launch
