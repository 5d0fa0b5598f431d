#pragma once
// Gradient clipping (torch.nn.utils.clip_grad_norm_). The arithmetic is kernels/norm.h's.
#include <limits>
#include <vector>

#include "lockstep/autograd/variable.h"

namespace lockstep::optim {

struct ClipGradNormOptions {
  /// p of the p-norm; std::numeric_limits<double>::infinity() for the max-norm.
  double norm_type = 2.0;
  /// Throw ValueError when the total norm is NaN or infinite (instead of scaling by it).
  bool error_if_nonfinite = false;
};

/// Scales the gradients of params in place so that their joint norm (the norm of the per-parameter
/// norms) is at most max_norm: each is multiplied by min(1, max_norm / (total + 1e-6)). Parameters
/// without a gradient are skipped. Returns the total norm before clipping. Not collective: with
/// DDP, call it after the gradients are averaged (they are then equal on every rank). On a GPU it
/// reads one scalar back (the norm it returns); clipGradNormTensor reads nothing.
double clipGradNorm(const std::vector<autograd::Variable>& params, double max_norm,
                    const ClipGradNormOptions& options = {});

/// clipGradNorm, returning the total norm as a 0-d f64 tensor on the gradients' device (as
/// torch's clip_grad_norm_ returns a tensor); a host tensor holding 0 when no parameter has a
/// gradient. On a GPU the norm and the clip stay on the device: nothing is read back (so the
/// clipped step can be captured in a CUDA graph) unless error_if_nonfinite asks for the check,
/// which reads the norm.
Tensor clipGradNormTensor(const std::vector<autograd::Variable>& params, double max_norm,
                          const ClipGradNormOptions& options = {});

/// What clipGradNorm multiplies the gradients by for a total norm `total`: min(1, max_norm /
/// (total + 1e-6)), NaN for a NaN total (torch's clip_grad_norm_ then spreads it, as it does).
double clipCoefficient(double total, double max_norm);

/// The total norm clipGradNorm would compute, without changing anything.
double gradNorm(const std::vector<autograd::Variable>& params, double norm_type = 2.0);
/// Its two halves, for gradients that are not all in memory at once (ZeRO's swapped gradient
/// pieces): the p-norm of one tensor, accumulated in double, and the norm of such norms.
double tensorNorm(const Tensor& t, double norm_type = 2.0);
double combineNorms(const std::vector<double>& norms, double norm_type = 2.0);

}  // namespace lockstep::optim
