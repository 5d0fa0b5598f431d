#include "lockstep/optim/adam.h"

#include <map>

#include "lockstep/kernels/optimizer.h"

namespace lockstep::optim {

namespace {
void validate(const AdamOptions& o, const std::string& name) {
  LOCKSTEP_ENFORCE(o.lr >= 0.0, ValueError, name, ": invalid learning rate ", o.lr);
  LOCKSTEP_ENFORCE(o.eps >= 0.0, ValueError, name, ": invalid eps ", o.eps);
  LOCKSTEP_ENFORCE(o.beta1 >= 0.0 && o.beta1 < 1.0, ValueError, name, ": invalid beta1 ", o.beta1);
  LOCKSTEP_ENFORCE(o.beta2 >= 0.0 && o.beta2 < 1.0, ValueError, name, ": invalid beta2 ", o.beta2);
  LOCKSTEP_ENFORCE(o.weight_decay >= 0.0, ValueError, name, ": invalid weight_decay ", o.weight_decay);
}

}  // namespace

HyperParams Adam::toHyper(const AdamOptions& o) {
  return {{"lr", o.lr},
          {"beta1", o.beta1},
          {"beta2", o.beta2},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay},
          {"amsgrad", o.amsgrad},
          {"maximize", o.maximize}};
}

AdamOptions Adam::fromHyper(const HyperParams& h) {
  AdamOptions o;
  o.lr = hyperDouble(h, "lr");
  o.beta1 = hyperDouble(h, "beta1");
  o.beta2 = hyperDouble(h, "beta2");
  o.eps = hyperDouble(h, "eps");
  o.weight_decay = hyperDouble(h, "weight_decay");
  o.amsgrad = hyperBool(h, "amsgrad");
  o.maximize = hyperBool(h, "maximize");
  return o;
}

Adam::Adam(std::vector<Variable> params, const AdamOptions& options)
    : Adam("Adam", std::move(params), options, false) {}

Adam::Adam(std::string name, std::vector<Variable> params, const AdamOptions& options, bool decoupled)
    : Optimizer(std::move(name), toHyper(options), std::move(params)), decoupled_(decoupled) {
  validate(options, this->name());
}

int64_t Adam::stateElementsPerParameterElement(const ParamGroup& group) const {
  return hyperBool(group.options, "amsgrad") ? 3 : 2;
}

void Adam::step() {
  autograd::NoGradGuard no_grad;
  for (auto& group : paramGroups()) {
    const AdamOptions o = fromHyper(group.options);
    validate(o, name());
    // Parameters at the same step count are updated by one kernel call (on a GPU one launch for
    // many of them: kernels::adamStepMany); `grads` keeps converted gradients alive until then.
    std::map<int64_t, std::vector<kernels::AdamSpan>> by_step;
    std::vector<Tensor> grads;
    for (auto& param : group.params) {
      if (!param.hasGrad()) continue;
      Tensor& p = param.tensor();
      detail::checkUpdatable(p, name().c_str());
      Tensor g = detail::gradLike(p, param.grad());
      ParamState& st = state(param);
      auto buffer = [&](const char* key) {
        auto it = st.buffers.find(key);
        if (it == st.buffers.end()) it = st.buffers.emplace(key, zerosLike(param)).first;
        return it->second;
      };
      Tensor m = buffer("exp_avg"), v = buffer("exp_avg_sq");
      Tensor vmax = o.amsgrad ? buffer("max_exp_avg_sq") : Tensor();
      st.step += 1;
      grads.push_back(g);
      by_step[st.step].push_back({.param = p.devicePtr(),
                                  .grad = g.devicePtr(),
                                  .exp_avg = m.devicePtr(),
                                  .exp_avg_sq = v.devicePtr(),
                                  .max_exp_avg_sq = vmax.defined() ? vmax.devicePtr() : nullptr,
                                  .numel = p.numel(),
                                  .dtype = p.dtype(),
                                  .device = p.device()});
    }
    for (const auto& [step, spans] : by_step) {
      kernels::adamStepMany(spans, {.lr = o.lr,
                                    .beta1 = o.beta1,
                                    .beta2 = o.beta2,
                                    .eps = o.eps,
                                    .weight_decay = o.weight_decay,
                                    .decoupled_weight_decay = decoupled_,
                                    .amsgrad = o.amsgrad,
                                    .maximize = o.maximize,
                                    .step = step});
    }
  }
}

AdamW::AdamW(std::vector<Variable> params, const AdamWOptions& options)
    : Adam("AdamW", std::move(params), options, true) {}

}  // namespace lockstep::optim
