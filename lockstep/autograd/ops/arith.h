#pragma once
// Element-wise arithmetic: broadcasting binary ops (numpy rules), scalar ops, unary math and the
// operators that spell them.
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

}  // namespace lockstep::autograd
