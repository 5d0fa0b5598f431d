#include "lockstep/parallel/environment.h"

#include "lockstep/comm/backend_registry.h"
#include "lockstep/comm/init.h"

namespace lockstep::parallel {

DistributedEnvironment initFromEnvironment(const std::string& backend, std::chrono::milliseconds timeout) {
  DistributedEnvironment env;
  comm::InitOptions opts;
  opts.backend = backend;
  opts.timeout = timeout;
  if (!comm::findBackend(backend).needs_store) {
    // Checks that mpirun formed the world the environment describes, even a world of one.
    env.worker = comm::resolveInit(opts).env;
  } else {
    env.worker = comm::workerEnvironment();
  }
  if (env.worker.distributed()) env.group = comm::initProcessGroup(opts);
  return env;
}

}  // namespace lockstep::parallel
