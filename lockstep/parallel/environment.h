#pragma once
// Joining the job a launcher started (torch's init_process_group + the usual boilerplate).
#include <chrono>
#include <memory>
#include <string>

#include "lockstep/comm/process_group.h"
#include "lockstep/comm/worker_environment.h"

namespace lockstep::parallel {

struct DistributedEnvironment {
  /// Who this process is (comm::workerEnvironment()).
  comm::WorkerEnvironment worker;
  /// nullptr when the world has one rank (plain single-process training).
  std::shared_ptr<comm::ProcessGroup> group;

  int rank() const { return worker.rank; }
  int worldSize() const { return worker.world_size; }
  int localRank() const { return worker.local_rank; }
  /// Rank 0: the one that writes files and prints summaries.
  bool isMain() const { return worker.rank == 0; }
};

/// Reads the worker environment (comm/worker_environment.h: lockstep run, torchrun, mpirun,
/// srun). With a world of more than one rank it creates the process group on `backend`
/// (collective: every rank must call it); otherwise it returns a world of one without a group.
/// `timeout` is the group's collective timeout (comm::InitOptions::timeout; 0: LOCKSTEP_TIMEOUT,
/// else comm::kDefaultCollectiveTimeout). ValueError when the environment is malformed or
/// `backend` cannot form the world it describes.
DistributedEnvironment initFromEnvironment(const std::string& backend = "auto",
                                           std::chrono::milliseconds timeout = comm::kGroupTimeout);

}  // namespace lockstep::parallel
