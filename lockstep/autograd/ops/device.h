#pragma once
// Moving an activation between devices inside one forward (the seed's `x.to('cuda:1')` between
// model pieces on different GPUs): differentiable, the gradient moved back the other way.
#include "lockstep/autograd/variable.h"

namespace lockstep::autograd {

/// x on `device` (x itself when it is there already); its gradient goes back to x's device.
Variable toDevice(const Variable& x, const Device& device);

}  // namespace lockstep::autograd
