#pragma once
// Dropout.
#include "lockstep/autograd/variable.h"
#include "lockstep/tensor/generator.h"

namespace lockstep::autograd {

/// Zeroes elements with probability p and scales the rest by 1/(1-p) when training; identity
/// otherwise. The mask comes from gen (seeded, counter-based).
Variable dropout(const Variable& x, double p, bool training, Generator& gen = defaultGenerator());

}  // namespace lockstep::autograd
