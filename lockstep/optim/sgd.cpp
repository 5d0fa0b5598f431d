#include "lockstep/optim/sgd.h"

namespace lockstep::optim {

namespace {
void validate(const SGDOptions& o) {
  LOCKSTEP_ENFORCE(o.lr >= 0.0, ValueError, "SGD: invalid learning rate ", o.lr);
  LOCKSTEP_ENFORCE(o.momentum >= 0.0, ValueError, "SGD: invalid momentum ", o.momentum);
  LOCKSTEP_ENFORCE(o.weight_decay >= 0.0, ValueError, "SGD: invalid weight_decay ", o.weight_decay);
  LOCKSTEP_ENFORCE(!o.nesterov || (o.momentum > 0.0 && o.dampening == 0.0), ValueError,
                   "SGD: nesterov momentum requires a momentum and zero dampening");
}

// One parameter. The casts of the scalars to T and the order of operations mirror PyTorch's
// _single_tensor_sgd, so f32 results agree with torch to rounding and f64 ones to ~1e-16.
template <typename T>
void sgdUpdate(T* __restrict p, const T* __restrict g, T* __restrict buf, int64_t n, const SGDOptions& o,
               bool first) {
  const T wd = static_cast<T>(o.weight_decay), mom = static_cast<T>(o.momentum);
  const T damp = static_cast<T>(1.0 - o.dampening), neg_lr = static_cast<T>(-o.lr);
  const bool has_wd = o.weight_decay != 0.0, maximize = o.maximize, nesterov = o.nesterov;
#pragma omp parallel for simd schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) {
    T d = maximize ? -g[i] : g[i];
    if (has_wd) d = d + wd * p[i];
    if (buf) {
      T b = first ? d : buf[i] * mom + damp * d;
      buf[i] = b;
      d = nesterov ? d + mom * b : b;
    }
    p[i] = p[i] + neg_lr * d;
  }
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

void SGD::step() {
  autograd::NoGradGuard no_grad;
  for (auto& group : paramGroups()) {
    const SGDOptions o = fromHyper(group.options);
    validate(o);
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
          first = true;
          it = buffers.emplace("momentum_buffer", zerosLike(param)).first;
        }
        buf = it->second;
      }
      visitDType(p.dtype(), [&](auto tag) {
        using T = decltype(tag);
        if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
          sgdUpdate<T>(p.data<T>(), g.data<T>(), buf.defined() ? buf.data<T>() : nullptr, p.numel(), o,
                       first);
        }
      });
    }
  }
}

}  // namespace lockstep::optim
