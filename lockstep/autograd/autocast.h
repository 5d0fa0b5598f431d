#pragma once
// Autocast: lockstep's torch.autocast(device_type="cpu", dtype=...). Inside an AutocastGuard, ops
// choose their compute dtype by a fixed policy (docs/nn.md has the table):
//   lower precision  conv2d, conv2d+max_pool2d, linear, matmul, scaled_dot_product_attention:
//                    operands cast to the autocast dtype
//                    (bf16 or f16); the kernels accumulate in f32 and return the autocast dtype.
//   f32              softmax, log_softmax, the losses, batch_norm, layer_norm, rms_norm, sum, mean: operands
//                    cast to f32, results in f32.
//   promote          add, sub, mul, div, swiglu: operands of different floating dtypes meet in the wider.
//   everything else  (relu and the other activations, pooling, dropout, reshapes, embedding in its
//                    weight's dtype, rotary) runs in the dtype
//                    it is given.
// Parameters stay f32 (master weights). A parameter (a leaf that requires a gradient) is cast once
// per outermost scope, not once per use; its gradient flows back through the cast and reaches the
// optimizer in f32. As in PyTorch, wrap only the forward pass and the loss: the cast cache lives
// until the outermost scope ends, so an optimizer step inside a scope would leave stale casts.
// Thread-safety: the state and the cache are per thread.
#include <optional>

#include "lockstep/autograd/variable.h"

namespace lockstep::autograd {

/// Differentiable cast: x's values as dtype; the gradient is cast back to x's dtype. Returns x
/// itself when it already has dtype.
Variable toDType(const Variable& x, DType dtype);

/// The dtype lower-precision ops run in on this thread, or nullopt when autocast is off.
std::optional<DType> autocastDType();

/// RAII scope. dtype must be bf16 or f16 (ValueError otherwise); enabled=false turns autocast off
/// inside an enclosing scope (torch.autocast(enabled=False)). Scopes nest; the previous state
/// comes back when a scope ends, and the cast cache is cleared when the outermost one does.
class AutocastGuard {
 public:
  explicit AutocastGuard(DType dtype, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  std::optional<DType> prev_;
};

/// The policy's three casts, for op implementations. Each returns v unchanged when autocast is
/// off on this thread.
namespace autocast {
/// For lower-precision ops: an f32 v cast to the autocast dtype (parameters through the cache).
Variable lower(const Variable& v);
/// For f32 ops: a bf16/f16 v cast to f32.
Variable fp32(const Variable& v);
/// For promote ops: a and b in the wider of their floating dtypes (also outside autocast, as
/// PyTorch's type promotion does).
std::pair<Variable, Variable> promote(const Variable& a, const Variable& b);
/// Number of parameter casts made since the outermost scope began (tests: once per forward).
size_t castCacheMisses();
}  // namespace autocast

}  // namespace lockstep::autograd
