#pragma once
// Ranks as threads: fn(rank, group) on `world` threads, each with its own process group over one
// shared HashStore. The backend comes from LOCKSTEP_TEST_BACKEND (default shm). Rethrows the first
// failure after all threads joined.
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "lockstep/comm/init.h"
#include "lockstep/comm/store/hash_store.h"
#include "lockstep/parallel/environment.h"

namespace lockstep::testing {

inline void runThreadRanks(int world,
                           const std::function<void(int, std::shared_ptr<comm::ProcessGroup>)>& fn) {
  const char* backend = std::getenv("LOCKSTEP_TEST_BACKEND");
  auto store = std::make_shared<comm::HashStore>();
  std::vector<std::thread> threads;
  std::mutex mu;
  std::exception_ptr first;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r, comm::createProcessGroup(backend ? backend : "shm", store, r, world, std::chrono::seconds(60)));
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first) first = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

/// The environment of thread rank `rank` of `world` (no group on a world of one).
inline parallel::DistributedEnvironment worldOf(int rank, int world,
                                                std::shared_ptr<comm::ProcessGroup> group) {
  parallel::DistributedEnvironment env;
  env.worker.rank = rank;
  env.worker.world_size = world;
  env.worker.local_world_size = world;
  env.group = world > 1 ? std::move(group) : nullptr;
  return env;
}

}  // namespace lockstep::testing
