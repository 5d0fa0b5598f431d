#include "lockstep/nn/state_dict.h"

namespace lockstep::nn {

void StateDict::insert(std::string name, Tensor value) {
  LOCKSTEP_ENFORCE(!contains(name), ValueError, "StateDict: duplicate key '", name, "'");
  index_.emplace(name, items_.size());
  items_.emplace_back(std::move(name), std::move(value));
}

const Tensor& StateDict::at(const std::string& name) const {
  const Tensor* t = find(name);
  LOCKSTEP_ENFORCE(t != nullptr, ValueError, "StateDict: no key '", name, "'");
  return *t;
}

const Tensor* StateDict::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

bool StateDict::erase(const std::string& name) {
  auto it = index_.find(name);
  if (it == index_.end()) return false;
  items_.erase(items_.begin() + static_cast<std::ptrdiff_t>(it->second));
  index_.clear();
  for (size_t i = 0; i < items_.size(); ++i) index_.emplace(items_[i].first, i);
  return true;
}

std::vector<std::string> StateDict::keys() const {
  std::vector<std::string> out;
  out.reserve(items_.size());
  for (const auto& [k, v] : items_) out.push_back(k);
  return out;
}

StateDict StateDict::cloned() const {
  StateDict out;
  for (const auto& [k, v] : items_) out.insert(k, v.defined() ? v.clone() : v);
  return out;
}

}  // namespace lockstep::nn
