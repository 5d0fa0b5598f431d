#include "lockstep/comm/group_arrival.h"

#include <cstdio>
#include <vector>

#include "lockstep/util/error.h"

namespace lockstep::comm {

namespace {

std::string key(const std::string& prefix, int rank) { return prefix + "/" + std::to_string(rank); }

std::string sizeKey(const std::string& prefix, int size) { return prefix + "/size/" + std::to_string(size); }

// Ranks started by hand (torchrun's variables set per process) may disagree: every rank counts
// itself under the world size it was started for (one store request each; the keys are walked only
// to name a rank that disagrees), and under its rank.
void checkWorld(Store& store, const std::string& prefix, const std::string& backend, int rank, int size) {
  const int64_t twins = store.add(prefix + "/joined/" + std::to_string(rank), 0);
  LOCKSTEP_ENFORCE(twins <= 1, ValueError, backend, " backend: ", twins,
                   " processes joined the process group as rank ", rank,
                   ": give every process its own RANK (0 .. WORLD_SIZE - 1)");
  if (store.add(sizeKey(prefix, size), 0) >= size) return;  // every rank here says `size`
  for (int r = 0; r < size; ++r) {
    if (r == rank || !store.check({key(prefix, r)})) continue;
    const std::string theirs = store.getString(key(prefix, r));
    LOCKSTEP_ENFORCE(theirs == std::to_string(size), ValueError, backend, " backend: rank ", r,
                     " was started for a world of ", theirs, " ranks, rank ", rank, " for one of ", size,
                     ": WORLD_SIZE differs between the processes; give every process the same");
  }
}

}  // namespace

void awaitGroupArrival(Store& store, const std::string& prefix, const std::string& backend, int rank,
                       int size, std::chrono::milliseconds timeout) {
  store.add(prefix + "/joined/" + std::to_string(rank), 1);
  store.add(sizeKey(prefix, size), 1);  // before the arrival key: a rank seen arrived has counted
  store.setString(key(prefix, rank), std::to_string(size));
  std::vector<std::string> others;
  for (int r = 0; r < size; ++r)
    if (r != rank) others.push_back(key(prefix, r));
  if (others.empty()) return;
  try {
    store.wait(others, timeout);
    checkWorld(store, prefix, backend, rank, size);
    return;
  } catch (const TimeoutError&) {
    // Said below with the ranks rather than the store's keys, unless the ranks that came disagree.
  }
  checkWorld(store, prefix, backend, rank, size);
  std::string missing;
  int count = 0;
  for (int r = 0; r < size; ++r) {
    if (r == rank || store.check({key(prefix, r)})) continue;
    missing += (count++ == 0 ? "" : ", ") + std::to_string(r);
  }
  if (count == 0) return;  // the last one came just as the wait ended
  char waited[32];
  std::snprintf(waited, sizeof waited, "%.1f s", std::chrono::duration<double>(timeout).count());
  throw TimeoutError(::lockstep::detail::concat(
      backend, " backend: rank ", rank, " of ", size, " waited ", waited, " for ",
      count == 1 ? "rank " : "ranks ", missing,
      " to join the process group, in vain: ", count == 1 ? "it" : "they",
      " never started, ended before joining, or cannot reach the store. The wait is the group's "
      "timeout (a config's comm_timeout_seconds, `lockstep run --timeout`, LOCKSTEP_TIMEOUT): raise it "
      "where ranks start far apart"));
}

}  // namespace lockstep::comm
