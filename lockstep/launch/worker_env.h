#pragma once
// What a worker process is told about itself: its ranks, the job's size and where to rendezvous.
// Pure functions, unit-tested without processes.
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace lockstep::launch {

/// Where one node's workers sit in the job, from every node's worker count (index = node rank).
struct RankLayout {
  int group_rank = 0;        ///< This node's rank (GROUP_RANK).
  int group_world_size = 1;  ///< Number of nodes.
  int first_rank = 0;        ///< Global rank of this node's local rank 0.
  int local_world_size = 1;  ///< Workers on this node.
  int world_size = 1;        ///< Workers in the job.
};

/// Lays out global ranks node by node: node g's workers get ranks sum(nprocs[0..g)) onward.
/// ValueError when group_rank is out of range or a count is not positive.
RankLayout computeRankLayout(const std::vector<int>& nprocs_per_node, int group_rank);

/// Everything that differs between workers and attempts.
struct WorkerEnvSpec {
  RankLayout layout;
  int local_rank = 0;
  /// MASTER_ADDR/MASTER_PORT: where global rank 0 hosts the workers' own store (PyTorch's env://).
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  /// LOCKSTEP_STORE_ADDR/LOCKSTEP_STORE_PORT: the agents' store, which lockstep's workers join.
  std::string store_addr = "127.0.0.1";
  int store_port = 29500;
  std::string run_id;
  int restart_count = 0;  ///< The round: every start of the group before this one (LOCKSTEP_RESTART_COUNT).
  /// Restarts after failures (TORCHELASTIC_RESTART_COUNT, torchrun's meaning); unset: restart_count.
  std::optional<int> failure_restarts{};
  int max_restarts = 0;
  std::string error_file;                            ///< Empty: no error file.
  std::optional<std::chrono::milliseconds> timeout;  ///< LOCKSTEP_TIMEOUT; unset: not set.
  std::string join_token{};                          ///< LOCKSTEP_JOIN_TOKEN; empty: not set.
};

/// Set beside the OMP_NUM_THREADS=1 the launcher chose (torchrun's rule for CPU ranks sharing a host),
/// to the LOCAL_WORLD_SIZE it chose it for, so that a worker can tell it from a count the user (or a
/// script, or another launcher in between) set: `lockstep train` gives a rank on a GPU its share of
/// the host's cores instead (train/run_setup.h, gpuRankHostThreads).
inline constexpr const char* kDefaultedOmpThreads = "LOCKSTEP_DEFAULTED_OMP_NUM_THREADS";

/// The worker's environment: `base` (the agent's own) plus RANK, LOCAL_RANK, WORLD_SIZE,
/// LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE, MASTER_ADDR,
/// MASTER_PORT, LOCKSTEP_RUN_ID, LOCKSTEP_RESTART_COUNT, LOCKSTEP_MAX_RESTARTS,
/// LOCKSTEP_USE_AGENT_STORE=1, LOCKSTEP_STORE_ADDR, LOCKSTEP_STORE_PORT, LOCKSTEP_STORE_PREFIX,
/// LOCKSTEP_ERROR_FILE, LOCKSTEP_TIMEOUT, LOCKSTEP_JOIN_TOKEN, their TORCHELASTIC_* twins
/// (TORCHELASTIC_USE_AGENT_STORE=False), OMP_NUM_THREADS=1 when more than one worker shares the
/// node and it is not set (with kDefaultedOmpThreads beside it), and
/// (TORCH_)NCCL_ASYNC_ERROR_HANDLING=1 when not set, as torchrun.
std::map<std::string, std::string> buildWorkerEnv(const std::map<std::string, std::string>& base,
                                                  const WorkerEnvSpec& spec);

/// The key prefix workers should put in front of their own store keys for one attempt, so that
/// attempts never see each other's keys on the agent's store ("/worker/attempt_K/").
std::string workerStorePrefix(int restart_count);

/// The current process environment as a map.
std::map<std::string, std::string> currentEnvironment();

/// "K=V" strings for execve.
std::vector<std::string> toEnvStrings(const std::map<std::string, std::string>& env);

}  // namespace lockstep::launch
