#pragma once
// Shape ops: views (reshape, flatten, transpose, permute, narrow, split) and concat.
#include <cstdint>
#include <vector>

#include "lockstep/autograd/variable.h"

namespace lockstep::autograd {

Variable reshape(const Variable& x, const Shape& shape);
Variable flatten(const Variable& x, int64_t start_dim = 1, int64_t end_dim = -1);
Variable transpose(const Variable& x, int64_t d0, int64_t d1);
Variable permute(const Variable& x, const Shape& dims);
/// Rows [start, end) along dim.
Variable narrow(const Variable& x, int64_t dim, int64_t start, int64_t length);
Variable concat(const std::vector<Variable>& xs, int64_t dim);

/// torch.split: consecutive pieces of split_size along dim (the last one may be shorter). The
/// pieces are views of x (no copy), as in torch.
std::vector<Variable> split(const Variable& x, int64_t split_size, int64_t dim);
/// Pieces of the given sizes (they must sum to x.size(dim)).
std::vector<Variable> split(const Variable& x, const std::vector<int64_t>& sizes, int64_t dim);

}  // namespace lockstep::autograd
