#pragma once
// DeepSpeed's WarmupLR and WarmupDecayLR (deepspeed/runtime/lr_schedules.py), stepped once per
// optimizer step. The iteration counter starts at -1 and the groups' lrs are left alone until the
// first step(), which applies iteration 0 (= warmup_min_lr), exactly as DeepSpeed does.
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
