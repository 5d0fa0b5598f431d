#pragma once
// Sequential: children applied in order (torch.nn.Sequential). Children added with push_back() are
// named "0", "1", ... so parameters read "0.weight", "2.bias" as in PyTorch.
#include <memory>
#include <string>
#include <vector>

#include "lockstep/nn/module.h"

namespace lockstep::nn {

class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  explicit Sequential(std::vector<std::shared_ptr<Module>> modules);

  /// Appends under the next index name.
  void push_back(std::shared_ptr<Module> module);
  /// Appends under an explicit name.
  void add(const std::string& name, std::shared_ptr<Module> module);
  size_t size() const { return modules_.size(); }
  const std::shared_ptr<Module>& operator[](size_t i) const;

  Variable forward(const Variable& x) override;
  /// The modules, in order.
  std::vector<Module*> layers() override;

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

}  // namespace lockstep::nn
