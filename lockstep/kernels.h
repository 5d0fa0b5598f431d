#pragma once
// Umbrella header of the kernels module: each op group's dispatching entry points
// (oneDNN in kernels/dnnl/, plain loops in kernels/reference/).
#include "lockstep/kernels/accumulate.h"
#include "lockstep/kernels/activation.h"
#include "lockstep/kernels/batch_norm.h"
#include "lockstep/kernels/conv.h"
#include "lockstep/kernels/dispatch.h"
#include "lockstep/kernels/pool.h"
#include "lockstep/kernels/dropout.h"
#include "lockstep/kernels/linear.h"
#include "lockstep/kernels/loss.h"
#include "lockstep/kernels/softmax.h"
#include "lockstep/kernels/threads.h"
#include "lockstep/kernels/binary.h"
#include "lockstep/kernels/layer_norm.h"
#include "lockstep/kernels/reduce.h"
#include "lockstep/kernels/shape.h"
#include "lockstep/kernels/unary.h"
