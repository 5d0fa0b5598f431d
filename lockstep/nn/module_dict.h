#pragma once
// ModuleDict / ModuleList (torch.nn.ModuleDict, torch.nn.ModuleList): containers that only give
// their children names ("transformer.h.0.attn"), so that state dicts read like the original
// model's. They have no forward of their own; the owner calls the children.
#include <memory>
#include <string>
#include <vector>

#include "lockstep/nn/module.h"

namespace lockstep::nn {

class ModuleDict : public Module {
 public:
  ModuleDict() : Module("ModuleDict") {}
  template <typename M>
  std::shared_ptr<M> add(const std::string& name, std::shared_ptr<M> module) {
    return registerModule(name, std::move(module));
  }
};

template <typename M>
class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  /// Appends under the next index name ("0", "1", ...).
  std::shared_ptr<M> push_back(std::shared_ptr<M> module) {
    items_.push_back(registerModule(std::to_string(items_.size()), std::move(module)));
    return items_.back();
  }
  size_t size() const { return items_.size(); }
  const std::shared_ptr<M>& operator[](size_t i) const { return items_.at(i); }

 private:
  std::vector<std::shared_ptr<M>> items_;
};

}  // namespace lockstep::nn
