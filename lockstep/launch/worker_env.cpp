#include "lockstep/launch/worker_env.h"

#include <numeric>

#include "lockstep/comm/worker_environment.h"
#include "lockstep/util/error.h"

extern char** environ;

namespace lockstep::launch {

RankLayout computeRankLayout(const std::vector<int>& nprocs_per_node, int group_rank) {
  LOCKSTEP_ENFORCE(group_rank >= 0 && group_rank < static_cast<int>(nprocs_per_node.size()), ValueError,
                   "node rank ", group_rank, " is outside 0..", static_cast<int>(nprocs_per_node.size()) - 1);
  RankLayout l;
  l.group_rank = group_rank;
  l.group_world_size = static_cast<int>(nprocs_per_node.size());
  for (size_t g = 0; g < nprocs_per_node.size(); ++g) {
    LOCKSTEP_ENFORCE(nprocs_per_node[g] > 0, ValueError, "node ", g, " announced ", nprocs_per_node[g],
                     " workers; every node needs at least one");
    if (static_cast<int>(g) < group_rank) l.first_rank += nprocs_per_node[g];
  }
  l.local_world_size = nprocs_per_node[static_cast<size_t>(group_rank)];
  l.world_size = std::accumulate(nprocs_per_node.begin(), nprocs_per_node.end(), 0);
  return l;
}

std::string workerStorePrefix(int restart_count) {
  return "/worker/attempt_" + std::to_string(restart_count) + "/";
}

std::map<std::string, std::string> buildWorkerEnv(const std::map<std::string, std::string>& base,
                                                  const WorkerEnvSpec& spec) {
  LOCKSTEP_CHECK(spec.local_rank >= 0 && spec.local_rank < spec.layout.local_world_size,
                 "local_rank=", spec.local_rank, " local_world_size=", spec.layout.local_world_size);
  const RankLayout& l = spec.layout;
  comm::WorkerEnvironment w;
  w.rank = l.first_rank + spec.local_rank;
  w.world_size = l.world_size;
  w.local_rank = spec.local_rank;
  w.local_world_size = l.local_world_size;
  w.node_rank = l.group_rank;
  w.num_nodes = l.group_world_size;
  w.master_addr = spec.master_addr;
  w.master_port = spec.master_port;
  w.run_id = spec.run_id;
  w.restart_count = spec.restart_count;
  w.failure_restarts = spec.failure_restarts;
  w.max_restarts = spec.max_restarts;
  w.agent_store = true;
  w.store_addr = spec.store_addr;
  w.store_port = spec.store_port;
  w.store_prefix = workerStorePrefix(spec.restart_count);
  w.error_file = spec.error_file;
  w.timeout = spec.timeout;
  w.join_token = spec.join_token;
  w.launcher = comm::Launcher::lockstep_run;
  std::map<std::string, std::string> env = base;
  // What the agent itself was given (it may run under another launcher) must not leak through.
  for (const std::string& name : comm::workerVariableNames()) env.erase(name);
  for (const auto& [k, v] : comm::workerVariables(w)) env[k] = v;
  env.erase(kDefaultedOmpThreads);  // said only by the launcher that chose the 1 itself
  if (l.local_world_size > 1 && env.count("OMP_NUM_THREADS") == 0) {
    env["OMP_NUM_THREADS"] = "1";
    env[kDefaultedOmpThreads] = std::to_string(l.local_world_size);
  }
  // As torchrun: PyTorch's NCCL process groups abort a failed collective instead of hanging in it
  // (the variable's name before and since PyTorch 2.2).
  for (const char* nccl : {"NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_ASYNC_ERROR_HANDLING"})
    if (env.count(nccl) == 0) env[nccl] = "1";
  return env;
}

std::map<std::string, std::string> currentEnvironment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

std::vector<std::string> toEnvStrings(const std::map<std::string, std::string>& env) {
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

}  // namespace lockstep::launch
