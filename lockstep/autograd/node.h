#pragma once
// A node of the backward graph: the backward of one op application. Each node has one output (the
// op's result) and one edge per input, pointing at the node that consumes that input's gradient
// (the input's grad_fn, or the leaf's AccumulateGrad), or nullptr when the input needs none.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/tensor/tensor.h"

namespace lockstep::autograd {

struct VariableImpl;

class Node {
 public:
  Node();
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  /// Gradients for each input (size == edges().size(); undefined where an input needs none),
  /// given the gradient of this node's output.
  virtual std::vector<Tensor> apply(const Tensor& grad_output) = 0;
  /// apply(), where the engine already holds a gradient for some inputs: into[i], when not null, is
  /// that gradient for input i (a tensor of the input's shape and dtype that nothing else refers
  /// to). A node whose kernel can add its own gradient for input i into it in the pass that computes
  /// it (a cuDNN or cuBLAS beta of 1, an epilogue) does so and returns an undefined tensor for i;
  /// otherwise it returns the gradient and the engine adds it. Only called where accumulates().
  virtual std::vector<Tensor> applyInto(const Tensor& grad_output, const std::vector<Tensor*>& into) {
    return apply(grad_output);
  }
  /// Whether applyInto may take gradients in place (the engine looks for them only then).
  virtual bool accumulates() const { return false; }
  /// The op's name, e.g. "Conv2dBackward", used in error messages.
  virtual std::string name() const = 0;
  /// Drops saved tensors after a backward pass without retain_graph.
  virtual void releaseSaved() {}

  std::vector<std::shared_ptr<Node>>& edges() { return edges_; }
  const std::vector<std::shared_ptr<Node>>& edges() const { return edges_; }
  /// Later-created nodes run first among ready ones (as in PyTorch's engine).
  uint64_t sequenceNr() const { return sequence_nr_; }
  bool released() const { return released_; }
  void markReleased() {
    releaseSaved();
    released_ = true;
  }

 protected:
  /// into[i] of applyInto, or nullptr (into may be empty: apply() of a node that implements both).
  static Tensor* held(const std::vector<Tensor*>& into, size_t i) {
    return i < into.size() ? into[i] : nullptr;
  }

  std::vector<std::shared_ptr<Node>> edges_;
  uint64_t sequence_nr_;
  bool released_ = false;
};

/// The sink for a leaf's gradient: adds it into the leaf's .grad, then fires its ready hooks.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<VariableImpl> leaf);
  std::vector<Tensor> apply(const Tensor& grad_output) override;
  std::string name() const override { return "AccumulateGrad"; }
  void fireHooks();
  /// The leaf this accumulator feeds (DDP uses it to find parameters a graph does not reach).
  const VariableImpl* leaf() const { return leaf_.get(); }

 private:
  std::shared_ptr<VariableImpl> leaf_;
};

}  // namespace lockstep::autograd
