#pragma once
// The first step of building a process group over a store: every rank says it is there and waits
// for the others, up to the group's timeout, so that a rank that never started (its pod not
// scheduled, a crash before init) is named by rank within that timeout instead of leaving its
// peers in a backend's own rendezvous, which waits as long as the store lets it and names no one.
#include <chrono>
#include <string>

#include "lockstep/comm/store/store.h"

namespace lockstep::comm {

/// Collective over ranks 0..size-1 of the group whose keys are under prefix in store: publishes
/// this rank's arrival, then waits up to timeout for every other rank's. TimeoutError naming the
/// backend, the ranks that did not arrive and the settings of the timeout otherwise. Thread-safe
/// when store is.
void awaitGroupArrival(Store& store, const std::string& prefix, const std::string& backend, int rank,
                       int size, std::chrono::milliseconds timeout);

}  // namespace lockstep::comm
