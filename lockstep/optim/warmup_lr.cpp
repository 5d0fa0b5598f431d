#include "lockstep/optim/warmup_lr.h"

namespace lockstep::optim {

WarmupLR::WarmupLR(Optimizer& optimizer, const WarmupLROptions& options)
    : LRScheduler(optimizer, "last_batch_iteration", -1), options_(options) {
  apply();
}

double WarmupLR::lrAt(size_t group, int64_t iteration) const {
  return warmupLr(iteration, options_, baseLrs()[group]);
}

WarmupDecayLR::WarmupDecayLR(Optimizer& optimizer, const WarmupDecayLROptions& options)
    : LRScheduler(optimizer, "last_batch_iteration", -1), options_(options) {
  apply();
}

double WarmupDecayLR::lrAt(size_t group, int64_t iteration) const {
  return warmupDecayLr(iteration, options_, baseLrs()[group]);
}

}  // namespace lockstep::optim
