#include "lockstep/autograd/variable.h"

#include <algorithm>

#include "lockstep/autograd/engine.h"
#include "lockstep/autograd/node.h"

namespace lockstep::autograd {

namespace {
thread_local bool t_grad_enabled = true;
const Tensor kUndefined;
const std::shared_ptr<Node> kNoNode;
const std::string kNoName;
}  // namespace

bool isGradEnabled() { return t_grad_enabled; }
void setGradEnabled(bool enabled) { t_grad_enabled = enabled; }

Variable::Variable(Tensor data, bool requires_grad) : impl_(std::make_shared<VariableImpl>()) {
  impl_->data = std::move(data);
  if (requires_grad) setRequiresGrad(true);
}

Variable Variable::fromImpl(std::shared_ptr<VariableImpl> impl) {
  Variable v;
  v.impl_ = std::move(impl);
  return v;
}

Variable Variable::makeResult(Tensor data, std::shared_ptr<Node> grad_fn) {
  Variable v(std::move(data));
  if (grad_fn) {
    v.impl_->requires_grad = true;
    v.impl_->grad_fn = std::move(grad_fn);
  }
  return v;
}

const Tensor& Variable::tensor() const { return impl_ ? impl_->data : kUndefined; }
Tensor& Variable::tensor() {
  LOCKSTEP_ENFORCE(impl_, ValueError, "tensor() on an undefined Variable");
  return impl_->data;
}

bool Variable::requiresGrad() const { return impl_ && impl_->requires_grad; }

void Variable::setRequiresGrad(bool requires_grad) {
  LOCKSTEP_ENFORCE(impl_, ValueError, "setRequiresGrad on an undefined Variable");
  LOCKSTEP_ENFORCE(isLeaf(), ValueError,
                   "setRequiresGrad: only leaf variables can change requires_grad; use detach()");
  LOCKSTEP_ENFORCE(!requires_grad || isFloating(impl_->data.dtype()), ValueError,
                   "only floating tensors can require gradients, got dtype ", dtypeName(impl_->data.dtype()));
  impl_->requires_grad = requires_grad;
}

bool Variable::isLeaf() const { return !impl_ || impl_->grad_fn == nullptr; }
const std::shared_ptr<Node>& Variable::gradFn() const { return impl_ ? impl_->grad_fn : kNoNode; }
const Tensor& Variable::grad() const { return impl_ ? impl_->grad : kUndefined; }

void Variable::setGrad(Tensor grad) {
  LOCKSTEP_ENFORCE(impl_, ValueError, "setGrad on an undefined Variable");
  LOCKSTEP_ENFORCE(!grad.defined() || grad.shape() == impl_->data.shape(), ValueError,
                   "setGrad: gradient shape ", shapeToString(grad.shape()), " differs from the variable's ",
                   shapeToString(impl_->data.shape()));
  impl_->grad = std::move(grad);
}

void Variable::zeroGrad(bool set_to_none) {
  if (!impl_ || !impl_->grad.defined()) return;
  if (set_to_none) {
    impl_->grad = Tensor();
  } else {
    impl_->grad.zero();
  }
}

std::shared_ptr<Node> Variable::gradEdge() const {
  if (!requiresGrad()) return nullptr;
  if (impl_->grad_fn) return impl_->grad_fn;
  auto acc = impl_->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(impl_);
    impl_->grad_accumulator = acc;
  }
  return acc;
}

void Variable::backward(const Tensor& grad, bool retain_graph) {
  LOCKSTEP_ENFORCE(defined(), ValueError, "backward() on an undefined Variable");
  LOCKSTEP_ENFORCE(
      requiresGrad(), ValueError,
      "backward(): this variable does not require grad and has no grad_fn (was it computed under "
      "NoGradGuard, or from inputs that do not require grad?)");
  Tensor seed = grad;
  if (!seed.defined()) {
    LOCKSTEP_ENFORCE(numel() == 1, ValueError,
                     "backward() without a gradient needs a one-element output, got shape ",
                     shapeToString(shape()), "; pass the output's gradient explicitly");
    seed = Tensor::full(shape(), 1.0, dtype(), tensor().device());
  } else {
    LOCKSTEP_ENFORCE(seed.shape() == shape(), ValueError, "backward(): gradient shape ",
                     shapeToString(seed.shape()), " differs from the output shape ", shapeToString(shape()));
  }
  runBackward(gradEdge(), seed, retain_graph);
}

size_t Variable::registerGradReadyHook(GradReadyHook hook) {
  LOCKSTEP_ENFORCE(impl_ && isLeaf() && requiresGrad(), ValueError,
                   "gradient-ready hooks can only be registered on leaves that require grad");
  size_t id = impl_->next_hook_id++;
  impl_->hooks.push_back({id, std::move(hook)});
  return id;
}

void Variable::removeGradReadyHook(size_t id) {
  if (!impl_) return;
  auto& h = impl_->hooks;
  h.erase(std::remove_if(h.begin(), h.end(), [&](const HookEntry& e) { return e.id == id; }), h.end());
}

Variable Variable::detach() const { return Variable(tensor(), false); }

const std::string& Variable::name() const { return impl_ ? impl_->name : kNoName; }
void Variable::setName(std::string name) {
  LOCKSTEP_ENFORCE(impl_, ValueError, "setName on an undefined Variable");
  impl_->name = std::move(name);
}

}  // namespace lockstep::autograd
