#include "lockstep/comm/group_arrival.h"

#include <cstdio>
#include <vector>

#include "lockstep/util/error.h"

namespace lockstep::comm {

namespace {

std::string key(const std::string& prefix, int rank) { return prefix + "/" + std::to_string(rank); }

}  // namespace

void awaitGroupArrival(Store& store, const std::string& prefix, const std::string& backend, int rank,
                       int size, std::chrono::milliseconds timeout) {
  store.setString(key(prefix, rank), "1");
  std::vector<std::string> others;
  for (int r = 0; r < size; ++r)
    if (r != rank) others.push_back(key(prefix, r));
  if (others.empty()) return;
  try {
    store.wait(others, timeout);
    return;
  } catch (const TimeoutError&) {
    // Said below with the ranks rather than the store's keys.
  }
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
