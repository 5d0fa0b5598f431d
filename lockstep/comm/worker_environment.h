#pragma once
// Who a worker is, whoever started it: the one definition of the worker environment.
//
// `lockstep run` / torchrun (RANK, WORLD_SIZE, LOCAL_RANK, ...), mpirun (Open MPI's
// OMPI_COMM_WORLD_*, MPICH / Intel MPI's PMI_*) or srun (SLURM_*) each describe the same facts
// with their own variables. workerEnvironment() reads them once; every reader (process-group
// init, DDP setup, the training engine, `lockstep train`, the examples) asks it, and the launcher
// writes what it reads with workerVariables(). See docs/launch.md.
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace lockstep::comm {

/// What started this process.
enum class Launcher {
  none,          ///< nothing: a single process (rank 0 of 1)
  lockstep_run,  ///< `lockstep run` / `lockstep train --nproc-per-node`: RANK... plus LOCKSTEP_RUN_ID
  torchrun,      ///< RANK/WORLD_SIZE set by torchrun, another launcher, or by hand
  open_mpi,      ///< mpirun of Open MPI (OMPI_COMM_WORLD_*)
  mpich,         ///< mpiexec of MPICH / Intel MPI (PMI_*)
  slurm,         ///< srun (SLURM_PROCID, ...)
};
/// "lockstep run", "torchrun", "Open MPI", "MPICH", "Slurm" or "single process".
const char* launcherName(Launcher l);
/// True for mpirun / mpiexec: MPI has formed (or can form) the world of these processes.
bool isMpiLauncher(Launcher l);

struct WorkerEnvironment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;  ///< GROUP_RANK under torchrun; node index under mpirun / srun
  int num_nodes = 1;  ///< GROUP_WORLD_SIZE; world / local world under mpirun; SLURM_NNODES
  /// The rendezvous address. Empty when nothing says it: RANK/WORLD_SIZE jobs must set
  /// MASTER_ADDR (as torch requires); under mpirun / srun on one host it defaults to 127.0.0.1
  /// (Slurm: the first host of the node list).
  std::string master_addr;
  /// 0 when nothing says it; 29500 by default under mpirun, 20000 + SLURM_JOB_ID % 10000 under srun.
  int master_port = 0;
  /// True under `lockstep run`: the agent hosts the store, every rank is a client.
  bool agent_store = false;
  /// Where the agent's store is (LOCKSTEP_STORE_ADDR / LOCKSTEP_STORE_PORT, else MASTER_ADDR /
  /// MASTER_PORT). `lockstep run` gives MASTER_ADDR/MASTER_PORT to PyTorch's rank 0, which hosts
  /// its own TCPStore there, so lockstep's workers find the agent's store under their own names.
  std::string store_addr;
  int store_port = 0;
  /// Put before every store key (the launcher's per-attempt prefix).
  std::string store_prefix;
  /// How many times the job's workers were started before this start (LOCKSTEP_RESTART_COUNT, else
  /// TORCHELASTIC_RESTART_COUNT): restarts after failures and, in an elastic job, re-formations.
  int restart_count = 0;
  /// TORCHELASTIC_RESTART_COUNT as torchrun means it, restarts after failures only; unset: restart_count.
  std::optional<int> failure_restarts{};
  int max_restarts = 0;
  std::string run_id;
  std::string error_file;  ///< Where a failing worker writes its error (empty: none).
  Launcher launcher = Launcher::none;
  /// LOCKSTEP_TIMEOUT (seconds, under any launcher): the collective timeout chosen for the job
  /// (`lockstep run --timeout` sets it for its workers); unset: the backend's default.
  std::optional<std::chrono::milliseconds> timeout;
  /// LOCKSTEP_JOIN_TOKEN: the secret every store client proves it holds (HMAC challenge-response,
  /// docs/security.md); empty: the store asks for none.
  std::string join_token{};

  bool distributed() const { return world_size > 1; }
};

using EnvLookup = std::function<std::optional<std::string>(const char* name)>;

/// Reads the environment (`lookup`, the process's own by default). Precedence: RANK/WORLD_SIZE,
/// then Open MPI, PMI, Slurm; with none of them a single process. ValueError naming the variable
/// when one is malformed, out of range, or set without its partner (RANK without WORLD_SIZE), or
/// when an mpirun / srun job spans several hosts and MASTER_ADDR is not set. Thread-safe.
WorkerEnvironment workerEnvironment(const EnvLookup& lookup = {});

/// The variables a launcher gives a worker so that workerEnvironment() reads `env` back: RANK,
/// LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, ROLE_*, MASTER_ADDR,
/// MASTER_PORT, LOCKSTEP_RUN_ID, LOCKSTEP_RESTART_COUNT, LOCKSTEP_MAX_RESTARTS,
/// LOCKSTEP_USE_AGENT_STORE, LOCKSTEP_STORE_ADDR, LOCKSTEP_STORE_PORT, LOCKSTEP_STORE_PREFIX,
/// LOCKSTEP_ERROR_FILE, LOCKSTEP_TIMEOUT,
/// LOCKSTEP_JOIN_TOKEN (the last two when set) and their TORCHELASTIC_*
/// twins (what torchrun sets, so torch-style programs read them too). Pure.
std::map<std::string, std::string> workerVariables(const WorkerEnvironment& env);
/// Every variable workerVariables() may set (a launcher removes the stale ones it does not set).
const std::vector<std::string>& workerVariableNames();

/// A timeout in seconds as LOCKSTEP_TIMEOUT, `lockstep run --timeout` and the config give it
/// ("20", "0.5"): positive and finite, at most ten days. ValueError naming `what` otherwise.
std::chrono::milliseconds parseTimeoutSeconds(const std::string& what, const std::string& text);

/// The first host of a Slurm node list: "node[03-05,9],gpu1" -> "node03".
std::string firstSlurmHost(const std::string& nodelist);

}  // namespace lockstep::comm
