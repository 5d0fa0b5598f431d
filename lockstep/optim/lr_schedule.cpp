#include "lockstep/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "lockstep/util/error.h"

namespace lockstep::optim {

double stepLr(double base_lr, int64_t epoch, int64_t step_size, double gamma) {
  LOCKSTEP_ENFORCE(step_size > 0, ValueError, "StepLR: step_size must be positive, got ", step_size);
  return base_lr * std::pow(gamma, static_cast<double>(epoch / step_size));
}

double multiStepLr(double base_lr, int64_t epoch, const std::vector<int64_t>& milestones, double gamma) {
  const auto passed = std::upper_bound(milestones.begin(), milestones.end(), epoch) - milestones.begin();
  return base_lr * std::pow(gamma, static_cast<double>(passed));
}

double cosineAnnealingLr(double base_lr, int64_t epoch, int64_t t_max, double eta_min) {
  LOCKSTEP_ENFORCE(t_max > 0, ValueError, "CosineAnnealingLR: T_max must be positive, got ", t_max);
  return eta_min + (base_lr - eta_min) *
                       (1.0 + std::cos(M_PI * static_cast<double>(epoch) / static_cast<double>(t_max))) / 2.0;
}

WarmupType warmupTypeFromName(const std::string& name) {
  if (name == "log") return WarmupType::log;
  if (name == "linear") return WarmupType::linear;
  throw ValueError("unknown warmup_type '" + name + "' (expected log or linear)");
}

namespace {
// The warmup part of DeepSpeed's _get_gamma; n = max(2, warmup_num_steps), it < n.
double warmupGamma(int64_t it, int64_t n, WarmupType type) {
  if (type == WarmupType::log)
    return (1.0 / std::log(static_cast<double>(n))) * std::log(static_cast<double>(it + 1));
  return static_cast<double>(it) / static_cast<double>(n);
}
}  // namespace

double warmupLr(int64_t it, const WarmupLROptions& o, double group_lr) {
  const int64_t n = std::max<int64_t>(2, o.warmup_num_steps);
  const double gamma = it < 0 ? 0.0 : it < n ? warmupGamma(it, n, o.warmup_type) : 1.0;
  return o.warmup_min_lr + (o.warmup_max_lr.value_or(group_lr) - o.warmup_min_lr) * gamma;
}

double warmupDecayLr(int64_t it, const WarmupDecayLROptions& o, double group_lr) {
  const int64_t n = std::max<int64_t>(2, o.warmup_num_steps);
  double gamma;
  if (it < 0) {
    gamma = 0.0;
  } else if (it < n) {
    gamma = warmupGamma(it, n, o.warmup_type);
  } else {
    gamma = std::max(0.0, static_cast<double>(o.total_num_steps - it) /
                              std::max(1.0, static_cast<double>(o.total_num_steps - n)));
  }
  return o.warmup_min_lr + (o.warmup_max_lr.value_or(group_lr) - o.warmup_min_lr) * gamma;
}

}  // namespace lockstep::optim
