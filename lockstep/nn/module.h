#pragma once
// Module: the base of every layer and model (torch.nn.Module). A module owns named parameters
// (leaf Variables that require gradients), named buffers (plain tensors saved with the model, such
// as batch-norm running statistics) and named child modules, all kept in registration order so that
// namedParameters()/stateDict() list "conv1.weight", "conv1.bias", "conv2.weight", ... exactly as
// PyTorch would for the same definition.
//
// Thread-safety: a module is built and used by one thread at a time. forward() on the same module
// from two threads at once is only safe for modules without buffers that forward() updates.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/autograd/variable.h"
#include "lockstep/nn/state_dict.h"

namespace lockstep::nn {

/// Called with every parameter Module::registerParameter registers on this thread while set, after
/// it is made and before the constructor goes on (it may replace the variable's tensor with one of
/// the same shape, dtype and values: ZeRO's zero.Init scope, parallel/zero/init.h, moves parameters
/// into a file-backed mapping there). Returns the hook it replaces; an empty function removes it.
using ParameterRegisteredHook = std::function<void(autograd::Variable&)>;
ParameterRegisteredHook setParameterRegisteredHook(ParameterRegisteredHook hook);

using autograd::Variable;

class Module {
 public:
  /// type_name is what describe() and error messages call the module ("Linear", "Conv2d").
  explicit Module(std::string type_name);
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// The computation. The base implementation throws NotSupportedError (containers and losses
  /// that take other arguments override or overload it).
  virtual Variable forward(const Variable& x);
  /// forward(x) between the forward hooks (PyTorch's Module.__call__). Containers call their
  /// layers this way (Sequential, runBlocks); a direct forward() call runs no hooks.
  Variable operator()(const Variable& x);

  // ---- forward hooks ----
  /// Runs before forward(x).
  using ForwardPreHook = std::function<void(Module&)>;
  /// Gets forward's output and returns what the caller sees (the output, or the output passed
  /// through an op that records something for backward).
  using ForwardHook = std::function<Variable(Module&, const Variable&)>;
  /// Registers a pair of hooks (either may be empty); returns a handle for removeForwardHooks.
  size_t registerForwardHooks(ForwardPreHook pre, ForwardHook post);
  void removeForwardHooks(size_t handle);
  /// The children this module runs one after another through operator(), in that order
  /// (Sequential's modules, a language model's transformer blocks): the units ZeRO stage 3
  /// gathers one at a time. Empty by default.
  virtual std::vector<Module*> layers() { return {}; }

  const std::string& typeName() const { return type_name_; }

  // ---- introspection (all in registration order, recursing depth-first into children) ----
  /// Parameters with dotted names ("layer1.0.conv1.weight"). recurse=false: this module's own.
  std::vector<std::pair<std::string, Variable>> namedParameters(bool recurse = true) const;
  std::vector<Variable> parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> namedBuffers(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  /// Direct children.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> namedChildren() const { return children_; }
  std::vector<std::shared_ptr<Module>> children() const;
  /// This module ("" name) and every descendant, pre-order.
  std::vector<std::pair<std::string, Module*>> namedModules();
  /// The direct child registered under name; ValueError when absent.
  std::shared_ptr<Module> child(const std::string& name) const;
  /// Total number of parameter elements.
  int64_t numParameters() const;

  // ---- modes ----
  /// Sets training mode here and in every descendant (dropout and batch norm read it).
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool isTraining() const { return training_; }

  // ---- state ----
  /// Parameters then buffers of each module, depth-first in registration order (PyTorch's order).
  /// The tensors alias the live ones: clone them (StateDict::cloned()) for a snapshot.
  StateDict stateDict() const;
  /// Copies values in place (keeping storage, so optimizers and gradient views stay valid; dtypes
  /// are cast). strict: every key must match, else ValueError listing all missing, unexpected and
  /// shape-mismatched names. Non-strict: missing/unexpected keys are skipped; a shape mismatch is
  /// still an error (as in PyTorch). Nothing is copied when an error is raised.
  void loadStateDict(const StateDict& state, bool strict = true);
  /// Keys saved under an earlier name: a state dict key starting with old_prefix loads as
  /// new_prefix + the rest, so checkpoints written before a rename still load (what the
  /// load_state_dict pre-hooks of PyTorch models do for renamed layers). Keys of this module.
  void renameOnLoad(std::string old_prefix, std::string new_prefix);
  /// A key as a checkpoint may hold it, under this module's current names (renameOnLoad).
  std::string currentKey(const std::string& saved) const;
  /// Clears (set_to_none) or zero-fills every parameter gradient.
  void zeroGrad(bool set_to_none = true);
  /// Casts every floating parameter and buffer to dtype (gradients are dropped).
  void to(DType dtype);
  /// Moves every parameter and buffer (integer ones, such as BatchNorm's num_batches_tracked, too)
  /// to device (gradients are dropped), as torch's module.to(device): build on the host, then move,
  /// then make the optimizer.
  void to(const Device& device);
  /// The device of the first parameter (or buffer); cpu for a module with neither.
  Device device() const;
  /// A one-line-per-module summary, e.g. "MnistCnn(\n  (conv1): Conv2d(1, 32, ...)\n ...".
  std::string describe() const;
  /// What describe() prints inside the parentheses of this module (options); empty by default.
  virtual std::string extraRepr() const { return ""; }

 protected:
  /// Adds a parameter (a leaf requiring a gradient unless requires_grad is false). Returns a
  /// handle sharing the stored Variable. An undefined tensor registers "no parameter" (bias=false):
  /// it is skipped by every listing, like PyTorch's register_parameter(name, None).
  Variable registerParameter(const std::string& name, Tensor value, bool requires_grad = true);
  /// Adds a buffer (saved in stateDict, never trained). Returns a handle sharing its storage.
  Tensor registerBuffer(const std::string& name, Tensor value);
  template <typename M>
  std::shared_ptr<M> registerModule(const std::string& name, std::shared_ptr<M> module) {
    registerChild(name, module);
    return module;
  }
  /// The stored buffer (to replace a 0-d counter's value etc.).
  Tensor& buffer(const std::string& name);

 private:
  void registerChild(const std::string& name, std::shared_ptr<Module> module);
  void checkNewName(const std::string& name, const char* what) const;
  void describeInto(std::string& out, int indent) const;

  std::string type_name_;
  bool training_ = true;
  std::vector<std::pair<std::string, Variable>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  struct ForwardHooks {
    size_t handle;
    ForwardPreHook pre;
    ForwardHook post;
  };
  std::vector<ForwardHooks> hooks_;
  size_t next_hook_ = 0;
  std::vector<std::pair<std::string, std::string>> renamed_;  // {old prefix, new prefix}
};

}  // namespace lockstep::nn
