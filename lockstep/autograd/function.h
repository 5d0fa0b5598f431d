#pragma once
// How an op joins the graph: compute the forward on tensors, then
//   return record<MyBackward>(out, {&x, &w}, saved...);
// which attaches a MyBackward node (constructed from `saved...`) with one edge per input when
// gradients are enabled and some input requires one, and returns a plain result otherwise.
#include <initializer_list>
#include <memory>

#include "lockstep/autograd/node.h"
#include "lockstep/autograd/variable.h"

namespace lockstep::autograd {

/// True when an op on these inputs must record a node.
inline bool needsGrad(std::initializer_list<const Variable*> inputs) {
  if (!isGradEnabled()) return false;
  for (const Variable* v : inputs) {
    if (v && v->defined() && v->requiresGrad()) return true;
  }
  return false;
}

template <typename NodeT, typename... Args>
Variable record(Tensor out, std::initializer_list<const Variable*> inputs, Args&&... saved) {
  if (!needsGrad(inputs)) return Variable::makeResult(std::move(out), nullptr);
  auto node = std::make_shared<NodeT>(std::forward<Args>(saved)...);
  for (const Variable* v : inputs) node->edges().push_back(v && v->defined() ? v->gradEdge() : nullptr);
  return Variable::makeResult(std::move(out), std::move(node));
}

}  // namespace lockstep::autograd
