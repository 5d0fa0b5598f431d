#pragma once
// Learning-rate schedules as pure functions of the step (or epoch) count, so they can be tested
// and reasoned about without an optimizer. The LRScheduler classes apply them to parameter groups.
// Closed forms are used where PyTorch iterates (StepLR, MultiStepLR, CosineAnnealingLR); the two
// agree to rounding as long as nothing else changes the group's lr.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lockstep::optim {

/// StepLR: base_lr * gamma^(epoch / step_size).
double stepLr(double base_lr, int64_t epoch, int64_t step_size, double gamma);
/// MultiStepLR: base_lr * gamma^(number of milestones <= epoch); milestones sorted ascending.
double multiStepLr(double base_lr, int64_t epoch, const std::vector<int64_t>& milestones, double gamma);
/// CosineAnnealingLR: eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / t_max)) / 2.
double cosineAnnealingLr(double base_lr, int64_t epoch, int64_t t_max, double eta_min);

enum class WarmupType { log, linear };
/// "log" or "linear"; ValueError otherwise.
WarmupType warmupTypeFromName(const std::string& name);

struct WarmupLROptions {
  double warmup_min_lr = 0.0;
  /// Unset: each parameter group's lr when the scheduler is built (DeepSpeed's WarmupLR, whose
  /// warmup_max_lr defaults to None); WarmupDecayLROptions sets DeepSpeed's 0.001.
  std::optional<double> warmup_max_lr;
  /// DeepSpeed clamps this to at least 2 (log(1) would divide by zero).
  int64_t warmup_num_steps = 1000;
  WarmupType warmup_type = WarmupType::log;
};

struct WarmupDecayLROptions : WarmupLROptions {
  WarmupDecayLROptions() { warmup_max_lr = 0.001; }
  int64_t total_num_steps = 0;
};

/// DeepSpeed's WarmupLR at iteration `it` (last_batch_iteration): min + (max - min) * gamma with
/// gamma = 0 before the start (it < 0: DeepSpeed's get_lr returns min_lrs there, and its
/// constructor applies that), log(it + 1) / log(n) (log) or it / n (linear) while
/// it < n = max(2, warmup_num_steps), and 1 after. max is o.warmup_max_lr, else group_lr.
double warmupLr(int64_t it, const WarmupLROptions& o, double group_lr);
/// DeepSpeed's WarmupDecayLR: WarmupLR during warmup, then
/// gamma = max(0, (total - it) / max(1, total - n)).
double warmupDecayLr(int64_t it, const WarmupDecayLROptions& o, double group_lr);

}  // namespace lockstep::optim
