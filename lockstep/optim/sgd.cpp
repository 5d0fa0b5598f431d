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
// _single_tensor_sgd, so f32 results agree with torch to rounding and f64 ones to ~1e-16. The
// options are template flags, so the loop has no branches and vectorizes.
template <typename T, bool kMaximize, bool kWd, bool kMomentum, bool kNesterov>
void sgdLoop(T* __restrict p, const T* __restrict g, T* __restrict buf, int64_t begin, int64_t end,
             const SGDOptions& o, bool first) {
  const T wd = static_cast<T>(o.weight_decay), mom = static_cast<T>(o.momentum);
  const T damp = static_cast<T>(1.0 - o.dampening), neg_lr = static_cast<T>(-o.lr);
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    T d = kMaximize ? -g[i] : g[i];
    if constexpr (kWd) d = d + wd * p[i];
    if constexpr (kMomentum) {
      const T later = buf[i] * mom + damp * d;
      const T b = first ? d : later;
      buf[i] = b;
      d = kNesterov ? d + mom * b : b;
    }
    p[i] = p[i] + neg_lr * d;
  }
}

template <typename T>
void sgdUpdate(T* p, const T* g, T* buf, int64_t n, const SGDOptions& o, bool first) {
  const int flags =
      (o.maximize ? 8 : 0) | (o.weight_decay != 0.0 ? 4 : 0) | (buf ? 2 : 0) | (o.nesterov ? 1 : 0);
  detail::forChunks(n, [&](int64_t b, int64_t e) {
    detail::withFlags(flags, [&](auto f) {
      constexpr int F = decltype(f)::value;
      sgdLoop<T, (F & 8) != 0, (F & 4) != 0, (F & 2) != 0, (F & 1) != 0>(p, g, buf, b, e, o, first);
    });
  });
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
