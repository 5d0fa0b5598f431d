#include "lockstep/autograd/node.h"

#include <atomic>

#include "lockstep/autograd/variable.h"
#include "lockstep/kernels/accumulate.h"

namespace lockstep::autograd {

namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};
}

Node::Node() : sequence_nr_(g_next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

AccumulateGrad::AccumulateGrad(std::shared_ptr<VariableImpl> leaf) : leaf_(std::move(leaf)) {
  sequence_nr_ = UINT64_MAX;  // run as soon as ready: gradient-ready hooks must fire early
}

std::vector<Tensor> AccumulateGrad::apply(const Tensor& grad_output) {
  LOCKSTEP_ENFORCE(grad_output.shape() == leaf_->data.shape(), ValueError, "gradient of shape ",
                   shapeToString(grad_output.shape()), " does not match parameter '", leaf_->name,
                   "' of shape ", shapeToString(leaf_->data.shape()));
  Tensor& g = leaf_->grad;
  if (!g.defined()) {
    // Take ownership when nobody else holds the gradient's storage; otherwise copy, so a later
    // in-place accumulation cannot write into another node's tensor.
    bool sole = grad_output.storage().use_count() == 1 && grad_output.isDense() &&
                grad_output.dtype() == leaf_->data.dtype();
    g = sole ? grad_output : grad_output.to(leaf_->data.dtype()).clone();
  } else {
    kernels::addInto(g, grad_output);
  }
  return {};
}

void AccumulateGrad::fireHooks() {
  if (leaf_->hooks.empty()) return;
  Variable v = Variable::fromImpl(leaf_);
  auto hooks = leaf_->hooks;  // a hook may remove itself
  for (auto& h : hooks) h.fn(v);
}

}  // namespace lockstep::autograd
