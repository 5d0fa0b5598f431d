#pragma once
// DeepSpeed's WarmupLR and WarmupDecayLR (deepspeed/runtime/lr_schedules.py, DeepSpeed 0.19),
// stepped once per optimizer step. The iteration counter starts at -1, and the constructor sets
// the groups' lrs to the schedule's value there (warmup_min_lr) as DeepSpeed's does: the first
// optimizer step runs at warmup_min_lr, and so does the second (iteration 0's gamma is 0 too).
#include "lockstep/optim/lr_scheduler.h"

namespace lockstep::optim {

class WarmupLR : public LRScheduler {
 public:
  WarmupLR(Optimizer& optimizer, const WarmupLROptions& options);
  const WarmupLROptions& options() const { return options_; }

 protected:
  double lrAt(size_t group, int64_t iteration) const override;

 private:
  WarmupLROptions options_;
};

class WarmupDecayLR : public LRScheduler {
 public:
  /// total_num_steps < warmup_num_steps is allowed (DeepSpeed only warns): the lr then drops to
  /// the decay value right after warmup.
  WarmupDecayLR(Optimizer& optimizer, const WarmupDecayLROptions& options);
  const WarmupDecayLROptions& options() const { return options_; }

 protected:
  double lrAt(size_t group, int64_t iteration) const override;

 private:
  WarmupDecayLROptions options_;
};

}  // namespace lockstep::optim
