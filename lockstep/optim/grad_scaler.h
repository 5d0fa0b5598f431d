#pragma once
// GradScaler: loss scaling for a loop of the user's own (torch.cuda.amp.GradScaler's API over
// DeepSpeed's scaler, optim/loss_scaler.h). The training engine does the same in its gradient
// phase; use this when not training through the engine.
//
//   optim::GradScaler scaler;                        // dynamic: 2^16, window 1000, hysteresis 2
//   {
//     autograd::AutocastGuard autocast(DType::f16);
//     loss = criterion(model->forward(x), y);
//   }
//   scaler.scale(loss).backward();
//   scaler.step(*optimizer);                         // unscales; skips the step on inf / nan
//   scaler.update();
//   optimizer->zeroGrad();
//
// With DistributedDataParallel the check is consistent across ranks without communication: the
// gradients step() looks at were averaged by the allreduce, so an inf or nan on any rank is one on
// every rank. Not thread-safe.
#include "lockstep/autograd/variable.h"
#include "lockstep/optim/loss_scaler.h"
#include "lockstep/optim/optimizer.h"

namespace lockstep::optim {

class GradScaler {
 public:
  explicit GradScaler(const LossScalerOptions& options = {});

  /// loss * scale().
  autograd::Variable scale(const autograd::Variable& loss) const;
  /// Divides every gradient of optimizer's parameters by scale() (once per step; a second call
  /// before update() does nothing) and returns whether all are finite.
  bool unscale(Optimizer& optimizer);
  /// unscale() (unless already done), then optimizer.step() when every gradient is finite.
  /// Returns whether the step was applied.
  bool step(Optimizer& optimizer);
  /// Adjusts the scale from this step's overflow (LossScaler::update). Call once per step().
  void update();

  double scaleValue() const { return scaler_.scale(); }
  /// Steps skipped for an overflow so far.
  int64_t skippedSteps() const { return scaler_.overflows(); }
  LossScaler& lossScaler() { return scaler_; }
  const LossScaler& lossScaler() const { return scaler_; }

 private:
  LossScaler scaler_;
  bool unscaled_ = false;
  bool overflow_ = false;
};

}  // namespace lockstep::optim
