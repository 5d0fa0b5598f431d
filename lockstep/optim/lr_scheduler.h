#pragma once
// Learning-rate schedulers: set each parameter group's lr from a pure schedule (lr_schedule.h) of
// a step counter. The PyTorch ones (StepLR, MultiStepLR, CosineAnnealingLR) count epochs from 0
// and apply the schedule's value for epoch 0 on construction, like torch's
// `_LRScheduler.__init__`; DeepSpeed's (warmup_lr.h) count iterations from -1 and apply the value
// there (warmup_min_lr) on construction, like DeepSpeed's. Call step() after optimizer.step(). Not
// thread-safe; not collective.
#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/optim/lr_schedule.h"
#include "lockstep/optim/optimizer.h"

namespace lockstep::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  /// Advances the counter by one and sets every group's lr to the schedule's value there.
  void step();
  /// The schedule's lr for each group at the current counter (what step() last applied).
  std::vector<double> getLr() const;
  /// The groups' current lrs (torch's get_last_lr()).
  std::vector<double> lastLr() const;
  /// Epoch (PyTorch schedulers) or last_batch_iteration (DeepSpeed's).
  int64_t counter() const { return counter_; }
  /// Each group's lr when the scheduler was built (torch's base_lrs).
  const std::vector<double>& baseLrs() const { return base_lrs_; }

  /// {counter key: counter, "base_lrs.<i>": base lr}; JSON-able scalars. The counter key is
  /// "last_epoch" for the PyTorch schedulers and "last_batch_iteration" for DeepSpeed's.
  HyperParams stateDict() const;
  /// Restores the counter (and base lrs); like torch and DeepSpeed, does not touch the groups' lrs
  /// (the optimizer's own state dict restores those).
  void loadStateDict(const HyperParams& state);

 protected:
  /// counter_key names the counter in stateDict(); the schedule starts at initial_counter.
  LRScheduler(Optimizer& optimizer, std::string counter_key, int64_t initial_counter);
  /// The lr of group `group` at counter value `counter`.
  virtual double lrAt(size_t group, int64_t counter) const = 0;
  /// Sets each group's lr to lrAt(counter()).
  void apply();

 private:
  Optimizer& optimizer_;
  std::string counter_key_;
  std::vector<double> base_lrs_;
  int64_t counter_;
};

struct StepLROptions {
  int64_t step_size = 1;
  double gamma = 0.1;
};
/// torch.optim.lr_scheduler.StepLR.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, const StepLROptions& options);

 protected:
  double lrAt(size_t group, int64_t epoch) const override;

 private:
  StepLROptions options_;
};

struct MultiStepLROptions {
  std::vector<int64_t> milestones{};
  double gamma = 0.1;
};
/// torch.optim.lr_scheduler.MultiStepLR (milestones are sorted; repeats count twice, as in torch).
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, const MultiStepLROptions& options);

 protected:
  double lrAt(size_t group, int64_t epoch) const override;

 private:
  MultiStepLROptions options_;
};

struct CosineAnnealingLROptions {
  int64_t t_max = 1;
  double eta_min = 0.0;
};
/// torch.optim.lr_scheduler.CosineAnnealingLR (closed form, no restarts).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, const CosineAnnealingLROptions& options);

 protected:
  double lrAt(size_t group, int64_t epoch) const override;

 private:
  CosineAnnealingLROptions options_;
};

}  // namespace lockstep::optim
