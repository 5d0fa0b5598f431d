#pragma once
// Norms of many tensors and clipping by them (torch.nn.utils.get_total_norm / clip_grads_with_norm_):
// the arithmetic of optim::clipGradNorm. On a GPU the joint norm stays on the device as a 0-d f64
// tensor and the clip reads its coefficient from there, so a clipped step reads nothing back and
// can be captured in a CUDA graph.
#include <vector>

#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels {

/// The p-norm of x (p > 0; infinity: the largest |x|, NaN when x holds one, as torch), accumulated in f64:
/// (sum |x|^p)^(1/p). On the CPU x is read where it is (contiguous; else from a contiguous copy) in
/// element order, in fixed chunks of 65,536 elements, each summed in 8 interleaved f64 lanes
/// (element i into lane i % 8, the lanes joined pairwise), the chunks' sums added in order: for
/// p = 2 and infinity the same answer on every CPU and with any number of threads (which take whole
/// chunks); other p go through the C library's pow, whose last bit may differ between CPUs. On a GPU it runs
/// on the device and reads the answer back (a host sync). Floating x, any strides; 0 for an empty x.
double norm(const Tensor& x, double p);

/// The p-norm of per-tensor norms ((sum norms^p)^(1/p), or their max for p = infinity); 0 for none.
/// Pure.
double combineNorms(const std::vector<double>& norms, double p);

/// The joint p-norm of xs (combineNorms of each one's norm()), as a 0-d f64 tensor on their device
/// (every x on one device; at least one x). On the CPU it is exactly combineNorms of norm(x). On a
/// GPU nothing is read back and the result is deterministic: per-chunk partial sums, then each
/// tensor's sum and the combination in a fixed order (no atomics); it agrees with the CPU's up to
/// the summation order of f64 sums. Floating xs (bf16/f16 too on a GPU), any strides.
Tensor totalNorm(const std::vector<Tensor>& xs, double p);

/// Multiplies every x in place by coef = min(1, max_norm / (total + 1e-6)) (NaN when that quotient
/// is NaN, as in PyTorch), leaving them untouched when coef is 1. total: one f64 element on the xs'
/// device (totalNorm's result). On the CPU total is read on the host; on a GPU each kernel reads it
/// on the device (no host sync). Floating xs (bf16/f16 scaled in f32 and rounded once, on both);
/// NotSupportedError naming the dtype otherwise.
void scaleByClipCoefficient(const std::vector<Tensor>& xs, const Tensor& total, double max_norm);

}  // namespace lockstep::kernels
