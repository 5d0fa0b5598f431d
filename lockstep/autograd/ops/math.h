#pragma once
// Broadcasting arithmetic, reductions, shape ops, concat and layer norm.
#include <cstdint>
#include <vector>

#include "lockstep/autograd/variable.h"

namespace lockstep::autograd {

/// Broadcasting element-wise ops (numpy rules; a shape mismatch names the op and both shapes).
Variable add(const Variable& a, const Variable& b);
Variable sub(const Variable& a, const Variable& b);
Variable mul(const Variable& a, const Variable& b);
Variable div(const Variable& a, const Variable& b);
Variable add(const Variable& a, double s);
Variable mul(const Variable& a, double s);
Variable neg(const Variable& a);
Variable pow(const Variable& a, double exponent);
Variable exp(const Variable& a);
Variable log(const Variable& a);
Variable sqrt(const Variable& a);

inline Variable operator+(const Variable& a, const Variable& b) { return add(a, b); }
inline Variable operator-(const Variable& a, const Variable& b) { return sub(a, b); }
inline Variable operator*(const Variable& a, const Variable& b) { return mul(a, b); }
inline Variable operator/(const Variable& a, const Variable& b) { return div(a, b); }
inline Variable operator+(const Variable& a, double s) { return add(a, s); }
inline Variable operator-(const Variable& a, double s) { return add(a, -s); }
inline Variable operator*(const Variable& a, double s) { return mul(a, s); }
inline Variable operator*(double s, const Variable& a) { return mul(a, s); }
inline Variable operator/(const Variable& a, double s) { return mul(a, 1.0 / s); }
inline Variable operator-(const Variable& a) { return neg(a); }

/// Sum of all elements (0-d result).
Variable sum(const Variable& x);
/// Sum over dims (negative allowed); keepdim keeps them as size 1.
Variable sum(const Variable& x, const std::vector<int64_t>& dims, bool keepdim = false);
Variable mean(const Variable& x);
Variable mean(const Variable& x, const std::vector<int64_t>& dims, bool keepdim = false);

Variable reshape(const Variable& x, const Shape& shape);
Variable flatten(const Variable& x, int64_t start_dim = 1, int64_t end_dim = -1);
Variable transpose(const Variable& x, int64_t d0, int64_t d1);
Variable permute(const Variable& x, const Shape& dims);
/// Rows [start, end) along dim.
Variable narrow(const Variable& x, int64_t dim, int64_t start, int64_t length);
Variable concat(const std::vector<Variable>& xs, int64_t dim);

/// Normalises over the trailing dims of normalized_shape; weight/bias of that shape or undefined.
Variable layerNorm(const Variable& x, const Shape& normalized_shape, const Variable& weight,
                   const Variable& bias, double eps = 1e-5);

}  // namespace lockstep::autograd
