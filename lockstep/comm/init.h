#pragma once
// Process group initialisation like torch.distributed.init_process_group.
//
//   auto pg = lockstep::comm::initProcessGroup({.backend = "auto"});   // env:// by default
//
// Rank and world size come from the options, else from the worker environment
// (comm/worker_environment.h: lockstep run / torchrun, mpirun or srun). The store:
//   env://           TCPStore at MASTER_ADDR:MASTER_PORT (defaults under mpirun / srun on one
//                    host: see worker_environment.h); rank 0 hosts the server unless the launcher
//                    agent already does (LOCKSTEP_USE_AGENT_STORE=1 or
//                    TORCHELASTIC_USE_AGENT_STORE=True): then the agent's store at
//                    LOCKSTEP_STORE_ADDR:LOCKSTEP_STORE_PORT. Keys go under $LOCKSTEP_STORE_PREFIX
//                    (the launcher's per-attempt prefix) + group_name.
//   tcp://host:port  the same with an explicit address.
//   file://path      FileStore on a shared filesystem.
// The mpi backend needs no store (MPI has its own rendezvous), but needs mpirun: started any other
// way with a world of several ranks it is an error, not a world of one per process.
// The backend names are backend_registry.h's.
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "lockstep/comm/process_group.h"
#include "lockstep/comm/store/store.h"
#include "lockstep/comm/worker_environment.h"

namespace lockstep::comm {

struct InitOptions {
  std::string backend = "auto";        // a name from backendNames(): shm | gloo | mpi | auto
  std::string init_method = "env://";  // env:// | tcp://host:port | file://path
  int rank = -1;                       // -1: from the environment
  int world_size = -1;                 // -1: from the environment
  /// The group's op timeout (torch's init_process_group(timeout=)). kGroupTimeout (0): the
  /// environment's LOCKSTEP_TIMEOUT, else kDefaultCollectiveTimeout.
  std::chrono::milliseconds timeout = kGroupTimeout;
  /// How long the store waits: to connect (rank 0 hosts it without a launcher) and for a key.
  /// kGroupTimeout (0): the group's op timeout, as torch's init_process_group uses one timeout for
  /// both, so a rank that never started is reported within the timeout the job was given.
  std::chrono::milliseconds store_timeout = kGroupTimeout;
  std::string group_name = "default";  // store key prefix, so several groups can share a store
};

/// What initProcessGroup derived from the options and the environment (pure; for tests).
struct ResolvedInit {
  int rank = 0;
  int world_size = 1;
  int local_rank = -1;     // -1: unknown
  std::string store_kind;  // "tcp", "file" or "none"
  std::string host;
  uint16_t port = 0;
  std::string path;
  bool host_store_server = false;
  std::string key_prefix;  // $LOCKSTEP_STORE_PREFIX, put before group_name
  WorkerEnvironment env;   // what the environment said
};

/// The op timeout initProcessGroup gives the group: options.timeout when set, else LOCKSTEP_TIMEOUT
/// (env.timeout), else kDefaultCollectiveTimeout. Pure.
std::chrono::milliseconds collectiveTimeout(const InitOptions& options, const WorkerEnvironment& env);
/// Resolves ranks and the store from options and workerEnvironment(). ValueError naming the missing or
/// malformed variable (or init_method) otherwise. Thread-safe.
ResolvedInit resolveInit(const InitOptions& options);
/// The store a resolved init describes (TCPStore/FileStore, prefixed by group_name).
std::shared_ptr<Store> createStore(const ResolvedInit& init, const InitOptions& options);
/// Resolves, connects the store and builds the backend. Collective over all world_size ranks.
std::shared_ptr<ProcessGroup> initProcessGroup(const InitOptions& options = {});
/// Builds the backend called `backend` (backend_registry.h) over an existing store (tests, the
/// launcher); ValueError naming the built backends for a name that is not one. Collective.
std::shared_ptr<ProcessGroup> createProcessGroup(
    const std::string& backend, std::shared_ptr<Store> store, int rank, int size,
    std::chrono::milliseconds timeout = kDefaultCollectiveTimeout);

}  // namespace lockstep::comm
