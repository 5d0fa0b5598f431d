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

// fp32_states of a group's options; absent (checkpoints from before the key) is false.
bool fp32States(const HyperParams& h) { return h.contains("fp32_states") && hyperBool(h, "fp32_states"); }

}  // namespace

HyperParams Adam::toHyper(const AdamOptions& o) {
  return {{"lr", o.lr},
          {"beta1", o.beta1},
          {"beta2", o.beta2},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay},
          {"amsgrad", o.amsgrad},
          {"maximize", o.maximize},
          {"bias_correction", o.bias_correction},
          {"fp32_states", o.fp32_states}};
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
  // Checkpoints written before the key existed always corrected.
  o.bias_correction = !h.contains("bias_correction") || hyperBool(h, "bias_correction");
  o.fp32_states = fp32States(h);
  return o;
}

Adam::Adam(std::vector<Variable> params, const AdamOptions& options)
    : Adam("Adam", std::move(params), options, false) {}

Adam::Adam(std::string name, std::vector<Variable> params, const AdamOptions& options, bool decoupled)
    : Optimizer(std::move(name), toHyper(options), std::move(params)), decoupled_(decoupled) {
  validate(options, this->name());
}

std::vector<std::string> Adam::stateKeys(const HyperParams& options) const {
  std::vector<std::string> keys{"step", "exp_avg", "exp_avg_sq"};
  if (hyperBool(options, "amsgrad")) keys.push_back("max_exp_avg_sq");
  return keys;
}

DType Adam::stateDType(const HyperParams& options, DType param) const {
  const bool low = param == DType::bf16 || param == DType::f16;
  return low && fp32States(options) ? DType::f32 : param;
}

namespace {
kernels::AdamParams paramsOf(const AdamOptions& o, bool decoupled, int64_t step) {
  return {.lr = o.lr,
          .beta1 = o.beta1,
          .beta2 = o.beta2,
          .eps = o.eps,
          .weight_decay = o.weight_decay,
          .decoupled_weight_decay = decoupled,
          .amsgrad = o.amsgrad,
          .maximize = o.maximize,
          .bias_correction = o.bias_correction,
          .step = step};
}

// What decides the shape of the update kernels (their flags, which buffers they touch).
int kernelFlags(const AdamOptions& o) {
  return (o.amsgrad ? 1 : 0) | (o.maximize ? 2 : 0) | (o.weight_decay != 0.0 ? 4 : 0);
}

std::vector<double> toVector(const std::array<double, kernels::kAdamScalars>& a) {
  return {a.begin(), a.end()};
}
}  // namespace

void Adam::step() { stepWith(nullptr); }

bool Adam::stepsFused() const {
  if (capturing()) return false;
  for (const ParamGroup& group : paramGroups())
    for (const Variable& p : group.params)
      if (p.dtype() != DType::f32 || !p.tensor().device().isCpu()) return false;
  return true;
}

void Adam::stepFused(const FusedStepExtras& extras) {
  LOCKSTEP_ENFORCE(stepsFused(), NotSupportedError, name(),
                   ": a fused step takes f32 host parameters outside a CUDA graph capture");
  stepWith(&extras);
}

void Adam::stepWith(const FusedStepExtras* extras) {
  autograd::NoGradGuard no_grad;
  for (size_t gi = 0; gi < paramGroups().size(); ++gi) {
    ParamGroup& group = paramGroups()[gi];
    const AdamOptions o = fromHyper(group.options);
    validate(o, name());
    // Parameters at the same step count are updated by one kernel call (on a GPU one launch for
    // many of them: kernels::adamStepMany); `grads` keeps converted gradients alive until then.
    std::map<int64_t, std::vector<kernels::AdamSpan>> by_step;
    std::map<int64_t, std::vector<Variable>> members;  // the parameters of each call (for a capture)
    std::vector<Tensor> grads;
    for (auto& param : group.params) {
      if (!param.hasGrad()) continue;
      Tensor& p = param.tensor();
      detail::checkUpdatable(p, name().c_str());
      Tensor g = detail::gradLike(p, param.grad());
      ParamState& st = state(param);
      const DType state_dtype = stateDType(group.options, p.dtype());
      auto buffer = [&](const char* key) {
        auto it = st.buffers.find(key);
        if (it == st.buffers.end()) {
          // A graph would zero it again at every replay.
          detail::checkNotCapturing(*this, param, key);
          it = st.buffers.emplace(key, zerosLike(param, state_dtype)).first;
        }
        LOCKSTEP_ENFORCE(it->second.dtype() == state_dtype, ValueError, name(), ": state '", key,
                         "' of parameter '", param.name(), "' is ", dtypeName(it->second.dtype()),
                         ", the options keep ", dtypeName(state_dtype),
                         " states (fp32_states changed after the first step)");
        return it->second;
      };
      Tensor m = buffer("exp_avg"), v = buffer("exp_avg_sq");
      Tensor vmax = o.amsgrad ? buffer("max_exp_avg_sq") : Tensor();
      st.step += 1;
      grads.push_back(g);
      void* copy = nullptr;
      DType copy_dtype = DType::bf16;
      if (extras) {
        if (auto it = extras->copies.find(p.dataPtr()); it != extras->copies.end()) {
          const Tensor& c = it->second;
          LOCKSTEP_ENFORCE(c.isDense() && c.numel() == p.numel() && c.device().isCpu(), ValueError, name(),
                           ": the copy of parameter '", param.name(), "' is ", c.describe(),
                           "; a fused step writes a dense host tensor of the parameter's ", p.numel(),
                           " elements");
          copy = c.dataPtr();
          copy_dtype = c.dtype();
        }
      }
      by_step[st.step].push_back({.param = p.devicePtr(),
                                  .grad = g.devicePtr(),
                                  .exp_avg = m.devicePtr(),
                                  .exp_avg_sq = v.devicePtr(),
                                  .max_exp_avg_sq = vmax.defined() ? vmax.devicePtr() : nullptr,
                                  .numel = p.numel(),
                                  .dtype = p.dtype(),
                                  .device = p.device(),
                                  .state_dtype = state_dtype,
                                  .param_copy = copy,
                                  .copy_dtype = copy_dtype});
      if (capturing()) members[st.step].push_back(param);
    }
    for (const auto& [step, spans] : by_step) {
      kernels::AdamParams params = paramsOf(o, decoupled_, step);
      if (extras) params.grad_scale = extras->grad_scale;
      if (capturing()) {
        // A replay's call: its parameters' step counts advance together (they stay equal), and its
        // scalars come from the group's hyper-parameters of that time.
        auto next = [this, gi, vars = members[step], flags = kernelFlags(o)] {
          const AdamOptions now = fromHyper(paramGroups()[gi].options);
          validate(now, name());
          LOCKSTEP_ENFORCE(kernelFlags(now) == flags, ValueError, name(),
                           ": amsgrad, maximize or whether weight_decay is 0 changed in group ", gi,
                           " after its step was captured in a CUDA graph; the graph cannot follow");
          int64_t t = 0;
          for (const Variable& v : vars) t = ++state(v).step;
          return toVector(kernels::adamScalars(paramsOf(now, decoupled_, t)));
        };
        params.device_scalars =
            captureUpdate(detail::oneDevice(spans), toVector(kernels::adamScalars(params)), std::move(next));
      }
      kernels::adamStepMany(spans, params);
    }
  }
}

AdamW::AdamW(std::vector<Variable> params, const AdamWOptions& options)
    : Adam("AdamW", std::move(params), options, true) {}

}  // namespace lockstep::optim
