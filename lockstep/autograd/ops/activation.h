#pragma once
#include "lockstep/autograd/variable.h"

namespace lockstep::autograd {

/// max(x, 0).
Variable relu(const Variable& x);

}  // namespace lockstep::autograd
