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
  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  using Store::wait;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool deleteKey(const std::string& key) override;
  int64_t numKeys() override;

 private:
  std::vector<std::string> missingLocked(const std::vector<std::string>& keys) const;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::unordered_map<std::string, std::vector<uint8_t>> map_;
};

}  // namespace lockstep::comm
