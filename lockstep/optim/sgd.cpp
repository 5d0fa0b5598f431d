#include "lockstep/optim/sgd.h"

#include "lockstep/kernels/optimizer.h"

namespace lockstep::optim {

namespace {
void validate(const SGDOptions& o) {
  LOCKSTEP_ENFORCE(o.lr >= 0.0, ValueError, "SGD: invalid learning rate ", o.lr);
  LOCKSTEP_ENFORCE(o.momentum >= 0.0, ValueError, "SGD: invalid momentum ", o.momentum);
  LOCKSTEP_ENFORCE(o.weight_decay >= 0.0, ValueError, "SGD: invalid weight_decay ", o.weight_decay);
  LOCKSTEP_ENFORCE(!o.nesterov || (o.momentum > 0.0 && o.dampening == 0.0), ValueError,
                   "SGD: nesterov momentum requires a momentum and zero dampening");
}

}  // namespace

HyperParams SGD::toHyper(const SGDOptions& o) {
  return {{"lr", o.lr},
          {"momentum", o.momentum},
          {"dampening", o.dampening},
          {"weight_decay", o.weight_decay},
          {"nesterov", o.nesterov},
          {"maximize", o.maximize}};
}

SGDOptions SGD::fromHyper(const HyperParams& h) {
  SGDOptions o;
  o.lr = hyperDouble(h, "lr");
  o.momentum = hyperDouble(h, "momentum");
  o.dampening = hyperDouble(h, "dampening");
  o.weight_decay = hyperDouble(h, "weight_decay");
  o.nesterov = hyperBool(h, "nesterov");
  o.maximize = hyperBool(h, "maximize");
  return o;
}

SGD::SGD(std::vector<Variable> params, const SGDOptions& options)
    : Optimizer("SGD", toHyper(options), std::move(params)) {
  validate(options);
}

std::vector<std::string> SGD::stateKeys(const HyperParams& options) const {
  if (hyperDouble(options, "momentum") == 0.0) return {};
  return {"momentum_buffer"};
}

namespace {
// What decides the shape of the update kernels (their flags, which buffers they touch).
int kernelFlags(const SGDOptions& o) {
  return (o.maximize ? 1 : 0) | (o.nesterov ? 2 : 0) | (o.momentum != 0.0 ? 4 : 0) |
         (o.weight_decay != 0.0 ? 8 : 0);
}

kernels::SgdParams paramsOf(const SGDOptions& o, bool first) {
  return {.lr = o.lr,
          .momentum = o.momentum,
          .dampening = o.dampening,
          .weight_decay = o.weight_decay,
          .nesterov = o.nesterov,
          .maximize = o.maximize,
          .first_step = first};
}

std::vector<double> toVector(const std::array<double, kernels::kSgdScalars>& a) {
  return {a.begin(), a.end()};
}
}  // namespace

void SGD::step() {
  autograd::NoGradGuard no_grad;
  for (size_t gi = 0; gi < paramGroups().size(); ++gi) {
    ParamGroup& group = paramGroups()[gi];
    const SGDOptions o = fromHyper(group.options);
    validate(o);
    // Parameters whose momentum buffer is new (first) and the others are each updated by one kernel
    // call (on a GPU one launch for many: kernels::sgdStepMany); `grads` keeps converted gradients
    // alive until then.
    std::vector<kernels::SgdSpan> spans[2];
    std::vector<Tensor> grads;
    for (auto& param : group.params) {
      if (!param.hasGrad()) continue;
      Tensor& p = param.tensor();
      detail::checkUpdatable(p, "SGD");
      Tensor g = detail::gradLike(p, param.grad());
      Tensor buf;
      bool first = false;
      if (o.momentum != 0.0) {
        auto& buffers = state(param).buffers;
        auto it = buffers.find("momentum_buffer");
        if (it == buffers.end()) {
          detail::checkNotCapturing(*this, param, "momentum_buffer");  // a graph would zero it again
          first = true;
          it = buffers.emplace("momentum_buffer", zerosLike(param)).first;
        }
        buf = it->second;
      }
      grads.push_back(g);
      spans[first ? 1 : 0].push_back({.param = p.devicePtr(),
                                      .grad = g.devicePtr(),
                                      .momentum_buffer = buf.defined() ? buf.devicePtr() : nullptr,
                                      .numel = p.numel(),
                                      .dtype = p.dtype(),
                                      .device = p.device()});
    }
    for (int first = 0; first < 2; ++first) {
      if (spans[first].empty()) continue;
      kernels::SgdParams params = paramsOf(o, first == 1);
      if (capturing()) {
        // A replay's call: the momentum buffers exist by then, so it is never a first step.
        auto next = [this, gi, flags = kernelFlags(o)] {
          const SGDOptions now = fromHyper(paramGroups()[gi].options);
          validate(now);
          LOCKSTEP_ENFORCE(
              kernelFlags(now) == flags, ValueError,
              "SGD: maximize, nesterov or whether momentum or weight_decay is 0 changed in group ", gi,
              " after its step was captured in a CUDA graph; the graph cannot follow");
          return toVector(kernels::sgdScalars(paramsOf(now, false)));
        };
        params.device_scalars = captureUpdate(detail::oneDevice(spans[first]),
                                              toVector(kernels::sgdScalars(params)), std::move(next));
      }
      kernels::sgdStepMany(spans[first], params);
    }
  }
}

}  // namespace lockstep::optim
