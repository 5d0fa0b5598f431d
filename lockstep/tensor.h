#pragma once
// Umbrella header of the tensor module.
#include "lockstep/tensor/allocator.h"
#include "lockstep/tensor/deferred_init.h"
#include "lockstep/tensor/generator.h"
#include "lockstep/tensor/shape.h"
#include "lockstep/tensor/storage.h"
#include "lockstep/tensor/strided.h"
#include "lockstep/tensor/tensor.h"
#include "lockstep/util/dtype.h"
