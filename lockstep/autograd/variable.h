#pragma once
// Variable: a Tensor that takes part in define-by-run autograd (Flashlight's fl::Variable).
// A Variable is a cheap shared handle: copies refer to the same data, gradient and graph node.
// Thread-safety: a graph is built and differentiated by one thread at a time.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/tensor/tensor.h"

namespace lockstep::autograd {

class Node;
class Variable;
struct VariableImpl;

/// Called with the leaf once its gradient for the current backward pass is complete.
using GradReadyHook = std::function<void(Variable& leaf)>;

class Variable {
 public:
  Variable() = default;
  explicit Variable(Tensor data, bool requires_grad = false);

  bool defined() const { return impl_ != nullptr; }
  /// The values. Mutating them in place is allowed outside of a graph that saved them.
  const Tensor& tensor() const;
  Tensor& tensor();

  bool requiresGrad() const;
  /// Only leaves can change this.
  void setRequiresGrad(bool requires_grad);
  /// A leaf has no grad_fn: user-created, or created with gradients off.
  bool isLeaf() const;
  const std::shared_ptr<Node>& gradFn() const;

  /// The accumulated gradient (undefined until a backward pass reaches this leaf).
  const Tensor& grad() const;
  bool hasGrad() const { return grad().defined(); }
  /// Replaces the gradient (e.g. with a view into a communication bucket).
  void setGrad(Tensor grad);
  /// set_to_none drops the gradient; otherwise it is filled with zeros in place (keeping views).
  void zeroGrad(bool set_to_none = true);

  /// Differentiates this variable. With no gradient it must have one element (a loss) and the
  /// seed gradient is 1. The graph is freed afterwards unless retain_graph; a second backward
  /// through a freed graph throws.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false);

  /// Registers a hook on a leaf that fires once per backward pass, during it, as soon as this
  /// leaf's gradient is complete (hooks of different leaves fire in the order they become ready).
  /// Returns an id for removeGradReadyHook.
  size_t registerGradReadyHook(GradReadyHook hook);
  void removeGradReadyHook(size_t id);

  /// Same data, no graph, no gradient.
  Variable detach() const;

  const std::string& name() const;
  void setName(std::string name);

  // Convenience accessors forwarding to tensor().
  const Shape& shape() const { return tensor().shape(); }
  int64_t dim() const { return tensor().dim(); }
  int64_t size(int64_t d) const { return tensor().size(d); }
  int64_t numel() const { return tensor().numel(); }
  DType dtype() const { return tensor().dtype(); }
  double item() const { return tensor().itemDouble(); }

  /// Identity (not value) comparison.
  bool sameAs(const Variable& o) const { return impl_ == o.impl_; }
  const std::shared_ptr<VariableImpl>& impl() const { return impl_; }

  /// For op implementations: the result variable of an op, attached to grad_fn when non-null.
  static Variable makeResult(Tensor data, std::shared_ptr<Node> grad_fn);
  /// For op implementations: the node that receives this variable's gradient (its grad_fn, or its
  /// leaf accumulator); nullptr when it does not require a gradient.
  std::shared_ptr<Node> gradEdge() const;
  /// A handle sharing an existing impl (for the engine and hooks).
  static Variable fromImpl(std::shared_ptr<VariableImpl> impl);

 private:
  std::shared_ptr<VariableImpl> impl_;
};

struct HookEntry {
  size_t id;
  GradReadyHook fn;
};

struct VariableImpl {
  Tensor data;
  Tensor grad;
  bool requires_grad = false;
  std::shared_ptr<Node> grad_fn;
  std::weak_ptr<Node> grad_accumulator;  // leaves only; the accumulator owns the VariableImpl
  std::vector<HookEntry> hooks;
  size_t next_hook_id = 0;
  std::string name;
};

/// Whether ops record graphs on this thread (torch.is_grad_enabled()).
bool isGradEnabled();
void setGradEnabled(bool enabled);

/// RAII: no graph is recorded while alive (torch.no_grad()).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(isGradEnabled()) { setGradEnabled(false); }
  ~NoGradGuard() { setGradEnabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace lockstep::autograd
