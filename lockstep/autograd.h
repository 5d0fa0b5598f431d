#pragma once
// Umbrella header of the autograd module: Variable, the engine, and every differentiable op.
#include "lockstep/autograd/engine.h"
#include "lockstep/autograd/function.h"
#include "lockstep/autograd/node.h"
#include "lockstep/autograd/ops/activation.h"
#include "lockstep/autograd/variable.h"
