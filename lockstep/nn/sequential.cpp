#include "lockstep/nn/sequential.h"

namespace lockstep::nn {

Sequential::Sequential(std::vector<std::shared_ptr<Module>> modules) : Module("Sequential") {
  for (auto& m : modules) push_back(std::move(m));
}

void Sequential::push_back(std::shared_ptr<Module> module) {
  add(std::to_string(modules_.size()), std::move(module));
}

void Sequential::add(const std::string& name, std::shared_ptr<Module> module) {
  registerModule(name, module);
  modules_.push_back(std::move(module));
}

const std::shared_ptr<Module>& Sequential::operator[](size_t i) const {
  LOCKSTEP_ENFORCE(i < modules_.size(), ValueError, "Sequential: index ", i, " out of range for ",
                   modules_.size(), " modules");
  return modules_[i];
}

std::vector<Module*> Sequential::layers() {
  std::vector<Module*> out;
  for (auto& m : modules_) out.push_back(m.get());
  return out;
}

Variable Sequential::forward(const Variable& x) {
  Variable y = x;
  for (auto& m : modules_) y = (*m)(y);
  return y;
}

}  // namespace lockstep::nn
