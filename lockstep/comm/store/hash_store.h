#pragma once
// In-process store (c10d's HashStore): ranks as threads in tests share one instance.
#include <condition_variable>
#include <mutex>
#include <unordered_map>

#include "lockstep/comm/store/store.h"

namespace lockstep::comm {

/// A map behind a mutex; waiters sleep on a condition variable. Thread-safe.
class HashStore : public Store {
 public:
  HashStore() = default;
  LOCKSTEP_STORE_OPS_OVERRIDE

 private:
  std::vector<std::string> missingLocked(const std::vector<std::string>& keys) const;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::unordered_map<std::string, std::vector<uint8_t>> map_;
};

}  // namespace lockstep::comm
