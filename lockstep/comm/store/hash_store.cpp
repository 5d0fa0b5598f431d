#include "lockstep/comm/store/hash_store.h"

#include "lockstep/util/error.h"

namespace lockstep::comm {

void HashStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  {
    std::lock_guard lock(mutex_);
    map_[key] = value;
  }
  cv_.notify_all();
}

std::vector<uint8_t> HashStore::get(const std::string& key) {
  wait({key}, timeout_);
  std::lock_guard lock(mutex_);
  auto it = map_.find(key);
  LOCKSTEP_ENFORCE(it != map_.end(), PeerError, "HashStore key '", key,
                   "' was deleted while get() waited for it");
  return it->second;
}

int64_t HashStore::add(const std::string& key, int64_t delta) {
  int64_t v;
  {
    std::lock_guard lock(mutex_);
    auto& slot = map_[key];
    v = detail::parseCounter(key, slot) + delta;
    slot = detail::formatCounter(v);
  }
  cv_.notify_all();
  return v;
}

std::vector<uint8_t> HashStore::compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                           const std::vector<uint8_t>& desired) {
  std::vector<uint8_t> result;
  {
    std::lock_guard lock(mutex_);
    auto it = map_.find(key);
    if (it == map_.end()) {
      if (!expected.empty()) return {};
      map_[key] = desired;
      result = desired;
    } else if (it->second == expected) {
      it->second = desired;
      result = desired;
    } else {
      return it->second;
    }
  }
  cv_.notify_all();
  return result;
}

std::vector<std::string> HashStore::missingLocked(const std::vector<std::string>& keys) const {
  std::vector<std::string> missing;
  for (const auto& k : keys) {
    if (map_.find(k) == map_.end()) missing.push_back(k);
  }
  return missing;
}

void HashStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  bool ok = cv_.wait_for(lock, timeout, [&] { return missingLocked(keys).empty(); });
  if (!ok) {
    throw TimeoutError(::lockstep::detail::concat("HashStore: timed out after ", timeout.count(),
                                                  " ms waiting for keys ",
                                                  detail::joinKeys(missingLocked(keys)),
                                                  "; a peer did not publish them (did it start and reach the "
                                                  "same point?)"));
  }
}

bool HashStore::check(const std::vector<std::string>& keys) {
  std::lock_guard lock(mutex_);
  return missingLocked(keys).empty();
}

bool HashStore::deleteKey(const std::string& key) {
  std::lock_guard lock(mutex_);
  return map_.erase(key) > 0;
}

int64_t HashStore::numKeys() {
  std::lock_guard lock(mutex_);
  return static_cast<int64_t>(map_.size());
}

}  // namespace lockstep::comm
