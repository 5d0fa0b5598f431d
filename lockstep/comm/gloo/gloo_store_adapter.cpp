#include "lockstep/comm/gloo/gloo_store_adapter.h"

namespace lockstep::comm {

void GlooStoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  store_->set(key, std::vector<uint8_t>(data.begin(), data.end()));
}

std::vector<char> GlooStoreAdapter::get(const std::string& key) {
  auto v = store_->get(key);
  return std::vector<char>(v.begin(), v.end());
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys) { store_->wait(keys); }

void GlooStoreAdapter::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  store_->wait(keys, timeout);
}

}  // namespace lockstep::comm
