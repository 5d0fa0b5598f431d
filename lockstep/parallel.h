#pragma once
// Umbrella header of the parallel module: DistributedDataParallel and friends.
#include "lockstep/parallel/bucket_assignment.h"
#include "lockstep/parallel/comm_hook.h"
#include "lockstep/parallel/distributed_data_parallel.h"
#include "lockstep/parallel/distributed_optimizer.h"
#include "lockstep/parallel/engine.h"
#include "lockstep/parallel/environment.h"
#include "lockstep/parallel/prepare.h"
#include "lockstep/parallel/reducer.h"
#include "lockstep/parallel/tensor_comm.h"
