#pragma once
// Who a worker is, whoever started it: `lockstep run`/torchrun (RANK, WORLD_SIZE...), mpirun
// (Open MPI's OMPI_COMM_WORLD_*, MPICH/Intel MPI's PMI_*) or srun (SLURM_*). A training program
// calls workerIdentity() once and does not care which launcher ran it. See docs/launch.md.
#include <functional>
#include <optional>
#include <string>

namespace lockstep::launch {

struct WorkerIdentity {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  /// True under `lockstep run`/torchrun: the agent hosts the store, every rank is a client and
  /// prefixes its keys with store_prefix. False under mpirun/srun: rank 0 hosts the store.
  bool agent_store = false;
  std::string store_prefix;
  int restart_count = 0;
  std::string source;  ///< "lockstep run", "torchrun", "Open MPI", "MPICH", "Slurm" or "single process".
};

using EnvLookup = std::function<std::optional<std::string>(const char* name)>;

/// Reads the identity from the environment (`lookup`, the real one by default). Precedence:
/// RANK/WORLD_SIZE, then Open MPI, PMI, Slurm; with none of them a single process (rank 0 of 1).
/// ValueError naming the variable when one is malformed or MASTER_ADDR is needed but unset.
WorkerIdentity workerIdentity(const EnvLookup& lookup = {});

/// The first host of a Slurm node list: "node[03-05,9],gpu1" -> "node03".
std::string firstSlurmHost(const std::string& nodelist);

}  // namespace lockstep::launch
