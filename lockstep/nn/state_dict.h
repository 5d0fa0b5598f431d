#pragma once
// StateDict: an insertion-ordered name -> Tensor map (PyTorch's OrderedDict state_dict()).
// Module::stateDict() fills it with aliases of the live parameters and buffers; clone() the
// entries (or the whole dict with cloned()) to take a snapshot that later training does not change.
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "lockstep/tensor/tensor.h"

namespace lockstep::nn {

class StateDict {
 public:
  using Item = std::pair<std::string, Tensor>;

  /// Appends an entry; ValueError if the name is already present.
  void insert(std::string name, Tensor value);
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  /// The entry's tensor; ValueError naming the key when absent.
  const Tensor& at(const std::string& name) const;
  /// nullptr when absent.
  const Tensor* find(const std::string& name) const;
  /// Removes an entry if present (order of the rest is kept); returns whether it was there.
  bool erase(const std::string& name);

  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  std::vector<std::string> keys() const;
  /// A deep copy: every tensor cloned.
  StateDict cloned() const;

  std::vector<Item>::const_iterator begin() const { return items_.begin(); }
  std::vector<Item>::const_iterator end() const { return items_.end(); }

 private:
  std::vector<Item> items_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace lockstep::nn
