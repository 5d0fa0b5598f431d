#pragma once
// A convolution followed by max-pooling (and relu) as one op, in cache-sized chunks of the batch.
#include "lockstep/autograd/ops/conv.h"
#include "lockstep/autograd/ops/pool.h"

namespace lockstep::autograd {

/// maxPool2d(conv2d(x, weight, bias, conv), pool), then relu when `relu` (relu after a max-pool equals
/// relu before it), as one op with the same values and gradients (up to the order of the weight
/// gradient's sums). It runs over the batch in chunks sized so the convolution's output stays in
/// the core's cache, and keeps only the pooling workspace for backward, never that output: far
/// less memory traffic for a CNN's first, largest layers. conv.fuse_relu must be false.
Variable conv2dMaxPool2d(const Variable& x, const Variable& weight, const Variable& bias,
                         const Conv2dOptions& conv, const Pool2dOptions& pool, bool relu);

}  // namespace lockstep::autograd
