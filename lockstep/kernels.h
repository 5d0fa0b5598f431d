#pragma once
// Umbrella header of the kernels module: each op group's dispatching entry points
// (oneDNN in kernels/dnnl/, plain loops in kernels/reference/).
#include "lockstep/kernels/accumulate.h"
#include "lockstep/kernels/activation.h"
#include "lockstep/kernels/conv.h"
#include "lockstep/kernels/dispatch.h"
#include "lockstep/kernels/threads.h"
