#pragma once
// Lets Gloo's rendezvous (connectFullMesh) run over a lockstep Store. Internal to the gloo backend.
#include <gloo/rendezvous/store.h>

#include <memory>

#include "lockstep/comm/store/store.h"

namespace lockstep::comm {

/// Thread-safe when the wrapped store is.
class GlooStoreAdapter : public ::gloo::rendezvous::Store {
 public:
  explicit GlooStoreAdapter(std::shared_ptr<lockstep::comm::Store> store) : store_(std::move(store)) {}
  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  std::shared_ptr<lockstep::comm::Store> store_;
};

}  // namespace lockstep::comm
