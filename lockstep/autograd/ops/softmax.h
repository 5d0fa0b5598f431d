#pragma once
// Softmax and log-softmax along one dim.
#include <cstdint>

#include "lockstep/autograd/variable.h"

namespace lockstep::autograd {

Variable softmax(const Variable& x, int64_t dim);
Variable logSoftmax(const Variable& x, int64_t dim);

}  // namespace lockstep::autograd
