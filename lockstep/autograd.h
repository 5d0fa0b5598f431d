#pragma once
// Umbrella header of the autograd module: Variable, the engine, and every differentiable op.
#include "lockstep/autograd/autocast.h"
#include "lockstep/autograd/checkpoint.h"
#include "lockstep/autograd/engine.h"
#include "lockstep/autograd/function.h"
#include "lockstep/autograd/node.h"
#include "lockstep/autograd/ops/activation.h"
#include "lockstep/autograd/ops/conv.h"
#include "lockstep/autograd/ops/linear.h"
#include "lockstep/autograd/ops/math.h"
#include "lockstep/autograd/ops/transformer.h"
#include "lockstep/autograd/variable.h"
