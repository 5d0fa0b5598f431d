#pragma once
// Joining the job a launcher started (torch's init_process_group + the usual boilerplate).
#include <memory>
#include <string>

#include "lockstep/comm/process_group.h"

namespace lockstep::parallel {

struct DistributedEnvironment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  /// nullptr when the world has one rank (plain single-process training).
  std::shared_ptr<comm::ProcessGroup> group;
};

/// Reads RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (or Open MPI's / Slurm's variables, see
/// comm/init.h). With a world of more than one rank it creates the process group on `backend`
/// (collective: every rank must call it); otherwise it returns a world of one without a group.
DistributedEnvironment initFromEnvironment(const std::string& backend = "auto");

}  // namespace lockstep::parallel
