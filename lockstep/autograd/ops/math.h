#pragma once
// Convenience umbrella for the tensor math ops: element-wise arithmetic and its operators,
// reductions, shape ops and layer norm. Declares nothing itself.
#include "lockstep/autograd/ops/arith.h"
#include "lockstep/autograd/ops/layer_norm.h"
#include "lockstep/autograd/ops/reduce.h"
#include "lockstep/autograd/ops/shape.h"
