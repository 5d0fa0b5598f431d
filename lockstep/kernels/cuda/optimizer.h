#pragma once
// lockstep's CUDA optimizer updates (built with LOCKSTEP_CUDA only; kernels/optimizer.cpp routes
// spans whose device is a GPU here, after its checks). Element for element the CPU loops' operation
// order and scalar casts, with every operation rounded on its own (no fused multiply-add), so the
// results equal the CPU's bit for bit: the scalars are the host's (kernels::sgdScalars /
// adamScalars, in double), cast to the element type on the device as the CPU casts them, and come
// either in the kernel's parameters or, with params.device_scalars, from device memory. Queued on
// the span's device's current stream; no host synchronisation.
#include <span>

#include "lockstep/kernels/optimizer.h"

namespace lockstep::kernels::cuda {

void sgdStep(const SgdSpan& span, const SgdParams& params);
void adamStep(const AdamSpan& span, const AdamParams& params);
/// Every span on the same GPU (the caller checks); spans of both dtypes may be mixed.
void sgdStepMany(std::span<const SgdSpan> spans, const SgdParams& params);
void adamStepMany(std::span<const AdamSpan> spans, const AdamParams& params);

}  // namespace lockstep::kernels::cuda
