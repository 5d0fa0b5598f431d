#include "lockstep/optim/grad_scaler.h"

#include "lockstep/autograd/ops/math.h"
#include "lockstep/kernels/finite.h"

namespace lockstep::optim {

GradScaler::GradScaler(const LossScalerOptions& options) : scaler_(options) {}

autograd::Variable GradScaler::scale(const autograd::Variable& loss) const { return loss * scaler_.scale(); }

bool GradScaler::unscale(Optimizer& optimizer) {
  if (unscaled_) return !overflow_;
  const double inverse = 1.0 / scaler_.scale();
  bool overflow = false;
  for (auto& group : optimizer.paramGroups()) {
    for (auto& p : group.params) {
      if (!p.hasGrad()) continue;
      Tensor g = p.grad();
      overflow = kernels::scaleAndCheckNonFinite(g, inverse) || overflow;
    }
  }
  unscaled_ = true;
  overflow_ = overflow;
  return !overflow;
}

bool GradScaler::step(Optimizer& optimizer) {
  if (!unscale(optimizer)) return false;
  optimizer.step();
  return true;
}

void GradScaler::update() {
  LOCKSTEP_ENFORCE(unscaled_, ValueError,
                   "GradScaler::update() called without a step() (or unscale()) since the last update");
  scaler_.update(overflow_);
  unscaled_ = false;
  overflow_ = false;
}

}  // namespace lockstep::optim
