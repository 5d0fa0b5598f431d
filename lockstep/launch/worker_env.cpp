#include "lockstep/launch/worker_env.h"

#include <numeric>

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
  std::map<std::string, std::string> env = base;
  auto put = [&](const char* k, const std::string& v) { env[k] = v; };
  auto num = [](int v) { return std::to_string(v); };
  const RankLayout& l = spec.layout;
  put("RANK", num(l.first_rank + spec.local_rank));
  put("LOCAL_RANK", num(spec.local_rank));
  put("WORLD_SIZE", num(l.world_size));
  put("LOCAL_WORLD_SIZE", num(l.local_world_size));
  put("GROUP_RANK", num(l.group_rank));
  put("GROUP_WORLD_SIZE", num(l.group_world_size));
  put("ROLE_NAME", "default");
  put("ROLE_RANK", num(l.first_rank + spec.local_rank));
  put("ROLE_WORLD_SIZE", num(l.world_size));
  put("MASTER_ADDR", spec.master_addr);
  put("MASTER_PORT", num(spec.master_port));
  put("LOCKSTEP_RUN_ID", spec.run_id);
  put("LOCKSTEP_RESTART_COUNT", num(spec.restart_count));
  put("LOCKSTEP_MAX_RESTARTS", num(spec.max_restarts));
  // The agent hosts the store on MASTER_PORT for the whole job: workers connect as clients
  // (rank 0 too) and prefix their keys per attempt, as torchrun's TORCHELASTIC_USE_AGENT_STORE.
  put("LOCKSTEP_USE_AGENT_STORE", "1");
  put("LOCKSTEP_STORE_PREFIX", workerStorePrefix(spec.restart_count));
  put("TORCHELASTIC_RUN_ID", spec.run_id);
  put("TORCHELASTIC_RESTART_COUNT", num(spec.restart_count));
  put("TORCHELASTIC_MAX_RESTARTS", num(spec.max_restarts));
  put("TORCHELASTIC_USE_AGENT_STORE", "True");
  if (!spec.error_file.empty()) {
    put("LOCKSTEP_ERROR_FILE", spec.error_file);
    put("TORCHELASTIC_ERROR_FILE", spec.error_file);
  } else {
    env.erase("LOCKSTEP_ERROR_FILE");
    env.erase("TORCHELASTIC_ERROR_FILE");
  }
  if (l.local_world_size > 1 && env.count("OMP_NUM_THREADS") == 0) put("OMP_NUM_THREADS", "1");
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
