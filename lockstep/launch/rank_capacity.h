#pragma once
// How many ranks this machine can take: `lockstep run` and `lockstep train` refuse a
// --nproc-per-node far past the cores or the memory before they start anything (a typo of 40000
// for 4 otherwise forks until the kernel's OOM killer ends it), unless --oversubscribe is given.
#include <cstdint>
#include <string>

namespace lockstep::launch {

/// What the ranks of one node share.
struct MachineCapacity {
  int cores = 1;              ///< This process's CPU affinity (availableCores()).
  int64_t memory_bytes = 0;   ///< MemAvailable, capped by the cgroup's limit; 0: unknown.
  std::string memory_source;  ///< Where memory_bytes came from, for the message.
};

/// More ranks per core than this is refused: ranks that wait on each other's collectives crawl
/// when they time-share a core, and a count this far past the cores is a typo more often than not.
constexpr int kMaxRanksPerCore = 4;
/// What a rank takes before it loads a model or data (a `lockstep train` rank of a tiny MLP peaks
/// at 27 MiB): ranks that could not each have this much are refused.
constexpr int64_t kMinRankBytes = int64_t{16} << 20;

/// This machine's cores and memory (/proc/meminfo, the cgroup v2 or v1 memory limit). Never throws.
MachineCapacity probeMachineCapacity();

/// ValueError naming `flag`, the count, the cores or memory and the fixes, when `nproc` ranks
/// would put more than kMaxRanksPerCore on a core or leave less than kMinRankBytes each. One rank
/// and `oversubscribe` always pass. Pure.
void checkRanksFit(const std::string& flag, int nproc, const MachineCapacity& machine, bool oversubscribe);

}  // namespace lockstep::launch
