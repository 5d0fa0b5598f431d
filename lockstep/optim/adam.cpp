#include "lockstep/optim/adam.h"

#include <algorithm>
#include <cmath>

namespace lockstep::optim {

namespace {
void validate(const AdamOptions& o, const std::string& name) {
  LOCKSTEP_ENFORCE(o.lr >= 0.0, ValueError, name, ": invalid learning rate ", o.lr);
  LOCKSTEP_ENFORCE(o.eps >= 0.0, ValueError, name, ": invalid eps ", o.eps);
  LOCKSTEP_ENFORCE(o.beta1 >= 0.0 && o.beta1 < 1.0, ValueError, name, ": invalid beta1 ", o.beta1);
  LOCKSTEP_ENFORCE(o.beta2 >= 0.0 && o.beta2 < 1.0, ValueError, name, ": invalid beta2 ", o.beta2);
  LOCKSTEP_ENFORCE(o.weight_decay >= 0.0, ValueError, name, ": invalid weight_decay ", o.weight_decay);
}

struct Scalars {
  double decay_factor;  // AdamW: 1 - lr * wd
  double step_size;     // lr / (1 - beta1^t)
  double bc2_sqrt;      // sqrt(1 - beta2^t)
};

// One parameter, mirroring the operation order and scalar casts of PyTorch 1.13's
// _single_tensor_adam/_single_tensor_adamw (non-capturable path). The options are template flags,
// so the loop has no branches and vectorizes (a run-time flag per element kept it scalar: 4x slower).
template <typename T, bool kMaximize, bool kL2, bool kDecay, bool kAmsgrad>
void adamLoop(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v, T* __restrict vmax,
              int64_t begin, int64_t end, const AdamOptions& o, const Scalars& s) {
  const T b1 = static_cast<T>(o.beta1), b2 = static_cast<T>(o.beta2);
  const T one_b1 = static_cast<T>(1.0 - o.beta1), one_b2 = static_cast<T>(1.0 - o.beta2);
  const T wd = static_cast<T>(o.weight_decay), decay = static_cast<T>(s.decay_factor);
  const T bc2_sqrt = static_cast<T>(s.bc2_sqrt), eps = static_cast<T>(o.eps);
  const T neg_step = static_cast<T>(-s.step_size);
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    T gi = kMaximize ? -g[i] : g[i];
    T pi = p[i];
    if constexpr (kDecay) pi = pi * decay;
    if constexpr (kL2) gi = gi + wd * pi;
    const T mi = m[i] * b1 + one_b1 * gi;
    const T vi = v[i] * b2 + one_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    T vh = vi;
    if constexpr (kAmsgrad) {
      vh = vmax[i] > vi ? vmax[i] : vi;
      vmax[i] = vh;
    }
    const T denom = std::sqrt(vh) / bc2_sqrt + eps;
    p[i] = pi + neg_step * (mi / denom);
  }
}

template <typename T>
void adamUpdate(T* p, const T* g, T* m, T* v, T* vmax, int64_t n, const AdamOptions& o, bool decoupled,
                const Scalars& s) {
  const bool l2 = !decoupled && o.weight_decay != 0.0, decay = decoupled && o.weight_decay != 0.0;
  const int flags = (o.maximize ? 8 : 0) | (l2 ? 4 : 0) | (decay ? 2 : 0) | (vmax ? 1 : 0);
  detail::forChunks(n, [&](int64_t b, int64_t e) {
    detail::withFlags(flags, [&](auto f) {
      constexpr int F = decltype(f)::value;
      adamLoop<T, (F & 8) != 0, (F & 4) != 0, (F & 2) != 0, (F & 1) != 0>(p, g, m, v, vmax, b, e, o, s);
    });
  });
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

void Adam::step() {
  autograd::NoGradGuard no_grad;
  for (auto& group : paramGroups()) {
    const AdamOptions o = fromHyper(group.options);
    validate(o, name());
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
      const double t = static_cast<double>(st.step);
      const Scalars s{1.0 - o.lr * o.weight_decay, o.lr / (1.0 - std::pow(o.beta1, t)),
                      std::sqrt(1.0 - std::pow(o.beta2, t))};
      visitDType(p.dtype(), [&](auto tag) {
        using T = decltype(tag);
        if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
          adamUpdate<T>(p.data<T>(), g.data<T>(), m.data<T>(), v.data<T>(),
                        vmax.defined() ? vmax.data<T>() : nullptr, p.numel(), o, decoupled_, s);
        }
      });
    }
  }
}

AdamW::AdamW(std::vector<Variable> params, const AdamWOptions& options)
    : Adam("AdamW", std::move(params), options, true) {}

}  // namespace lockstep::optim
