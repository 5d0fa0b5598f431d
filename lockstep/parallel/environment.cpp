#include "lockstep/parallel/environment.h"

#include <cstdlib>

#include "lockstep/comm/init.h"
#include "lockstep/util/error.h"

namespace lockstep::parallel {

DistributedEnvironment initFromEnvironment(const std::string& backend) {
  comm::InitOptions opts;
  opts.backend = backend;
  DistributedEnvironment env;
  comm::ResolvedInit r;
  try {
    r = comm::resolveInit(opts);
  } catch (const ValueError&) {
    // Nothing says this is a distributed job: a world of one. A partial or malformed setting
    // (WORLD_SIZE without RANK, a bad MASTER_PORT) is still an error, raised below.
    if (!std::getenv("WORLD_SIZE") && !std::getenv("OMPI_COMM_WORLD_SIZE") && !std::getenv("SLURM_NTASKS")) {
      return env;
    }
    throw;
  }
  env.rank = r.rank;
  env.world_size = r.world_size;
  env.local_rank = r.local_rank >= 0 ? r.local_rank : r.rank;
  if (r.world_size > 1) env.group = comm::initProcessGroup(opts);
  return env;
}

}  // namespace lockstep::parallel
