#pragma once
// Helpers for process-group tests: ranks as threads over one HashStore, and group factories.
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lockstep/comm/gloo/gloo_process_group.h"
#include "lockstep/comm/shm/shm_process_group.h"
#include "lockstep/comm/store/hash_store.h"
#include "lockstep/comm/store/prefix_store.h"

namespace lockstep::comm::testing {

inline std::shared_ptr<ProcessGroup> makeGroup(const std::string& backend, std::shared_ptr<Store> store,
                                               int rank, int size,
                                               std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  if (backend == "shm") {
    ShmOptions o;
    o.timeout = timeout;
    o.block_bytes = 64 << 10;      // small blocks: many rounds even for modest counts
    o.stream_min_bytes = 1 << 20;  // the 1M-element cases take the streaming path
    return std::make_shared<ShmProcessGroup>(store, rank, size, o);
  }
  GlooOptions o;
  o.hostname = "127.0.0.1";
  o.timeout = timeout;
  return std::make_shared<GlooProcessGroup>(store, rank, size, o);
}

/// Runs fn(rank) on size threads; rethrows the first exception after all joined.
inline void runRanks(int size, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  std::mutex mu;
  std::exception_ptr first;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        std::lock_guard lock(mu);
        if (!first) first = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

/// Runs fn(group) on size thread-ranks of a fresh group of backend.
inline void withGroups(const std::string& backend, int size, const std::function<void(ProcessGroup&)>& fn,
                       std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  auto store = std::make_shared<HashStore>();
  store->setTimeout(std::chrono::seconds(30));
  runRanks(size, [&](int r) {
    auto pg = makeGroup(backend, store, r, size, timeout);
    fn(*pg);
  });
}

}  // namespace lockstep::comm::testing
