#pragma once
// SGD with momentum, dampening, Nesterov momentum and L2 weight decay: torch.optim.SGD's exact update
//   d = g + wd * p;  buf = d (first step) or momentum * buf + (1 - dampening) * d;
//   d = nesterov ? d + momentum * buf : buf;  p -= lr * d
// State: "momentum_buffer" (when momentum != 0).
#include "lockstep/optim/optimizer.h"

namespace lockstep::optim {

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  /// Ascend instead of descend.
  bool maximize = false;
};

class SGD : public Optimizer {
 public:
  /// ValueError for a negative lr/momentum/weight_decay, or nesterov without momentum or with dampening.
  SGD(std::vector<Variable> params, const SGDOptions& options = {});
  void step() override;
  std::vector<std::string> stateKeys(const HyperParams& options) const override;

  static HyperParams toHyper(const SGDOptions& o);
  static SGDOptions fromHyper(const HyperParams& h);
};

}  // namespace lockstep::optim
