#pragma once
// Namespaces keys of an underlying store: key k becomes "prefix/k" (c10d's PrefixStore).
#include <memory>

#include "lockstep/comm/store/store.h"

namespace lockstep::comm {

/// Thread-safe when the base store is. The timeout starts as the base store's.
class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);
  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  using Store::wait;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool deleteKey(const std::string& key) override;
  /// Counts the keys of the whole base store (as c10d does).
  int64_t numKeys() override;

  /// The store this one forwards to.
  const std::shared_ptr<Store>& base() const { return base_; }

 private:
  std::string full(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> full(const std::vector<std::string>& keys) const;

  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace lockstep::comm
