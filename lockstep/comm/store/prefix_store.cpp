#include "lockstep/comm/store/prefix_store.h"

#include "lockstep/util/error.h"

namespace lockstep::comm {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), base_(std::move(base)) {
  LOCKSTEP_ENFORCE(base_ != nullptr, ValueError, "PrefixStore '", prefix_, "' needs a base store");
  timeout_ = base_->timeout();
}

std::vector<std::string> PrefixStore::full(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(full(k));
  return out;
}

void PrefixStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  base_->set(full(key), value);
}

std::vector<uint8_t> PrefixStore::get(const std::string& key) {
  // Wait with our own timeout first, so setTimeout() on this store is honoured.
  base_->wait({full(key)}, timeout_);
  return base_->get(full(key));
}

int64_t PrefixStore::add(const std::string& key, int64_t delta) { return base_->add(full(key), delta); }

std::vector<uint8_t> PrefixStore::compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                             const std::vector<uint8_t>& desired) {
  return base_->compareSet(full(key), expected, desired);
}

void PrefixStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  base_->wait(full(keys), timeout);
}

bool PrefixStore::check(const std::vector<std::string>& keys) { return base_->check(full(keys)); }

bool PrefixStore::deleteKey(const std::string& key) { return base_->deleteKey(full(key)); }

int64_t PrefixStore::numKeys() { return base_->numKeys(); }

}  // namespace lockstep::comm
