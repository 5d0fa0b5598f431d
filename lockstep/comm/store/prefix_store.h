#pragma once
// Namespaces keys of an underlying store: key k becomes "prefix/k" (c10d's PrefixStore).
#include <memory>

#include "lockstep/comm/store/store.h"

namespace lockstep::comm {

/// Thread-safe when the base store is. The timeout starts as the base store's.
class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);
  /// The ops, forwarded with the prefix; numKeys counts the keys of the whole base store (as c10d does).
  LOCKSTEP_STORE_OPS_OVERRIDE

  /// The store this one forwards to.
  const std::shared_ptr<Store>& base() const { return base_; }

 private:
  std::string full(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> full(const std::vector<std::string>& keys) const;

  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace lockstep::comm
