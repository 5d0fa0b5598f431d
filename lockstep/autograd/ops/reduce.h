#pragma once
// Sums and means over all or some dims.
#include <cstdint>
#include <vector>

#include "lockstep/autograd/variable.h"

namespace lockstep::autograd {

/// Sum of all elements (0-d result).
Variable sum(const Variable& x);
/// Sum over dims (negative allowed); keepdim keeps them as size 1.
Variable sum(const Variable& x, const std::vector<int64_t>& dims, bool keepdim = false);
Variable mean(const Variable& x);
Variable mean(const Variable& x, const std::vector<int64_t>& dims, bool keepdim = false);

}  // namespace lockstep::autograd
