#pragma once
// Umbrella header of the comm module: stores, process groups and their backends.
#include "lockstep/comm/backend_registry.h"
#include "lockstep/comm/gloo/gloo_process_group.h"
#include "lockstep/comm/hierarchical_process_group.h"
#include "lockstep/comm/init.h"
#include "lockstep/comm/store/file_store.h"
#include "lockstep/comm/store/hash_store.h"
#if LOCKSTEP_WITH_MPI  // a build configured with -DLOCKSTEP_WITH_MPI=OFF has no mpi backend
#include "lockstep/comm/mpi/mpi_process_group.h"
#endif
#include "lockstep/comm/process_group.h"
#include "lockstep/comm/reduce_op.h"
#include "lockstep/comm/shm/shm_process_group.h"
#include "lockstep/comm/store/prefix_store.h"
#include "lockstep/comm/store/store.h"
#include "lockstep/comm/store/tcp_store.h"
#include "lockstep/comm/work.h"
#include "lockstep/comm/worker_environment.h"
