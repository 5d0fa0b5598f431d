#include "lockstep/launch/launch_environment.h"

#include <cerrno>
#include <cstdlib>

#include "lockstep/util/env.h"
#include "lockstep/util/error.h"

namespace lockstep::launch {

namespace {

class Reader {
 public:
  explicit Reader(const EnvLookup& lookup) : lookup_(lookup) {}
  std::optional<std::string> str(const char* name) const { return lookup_ ? lookup_(name) : env::get(name); }
  bool has(const char* name) const { return str(name).has_value(); }
  std::optional<int> integer(const char* name) const {
    auto v = str(name);
    if (!v) return std::nullopt;
    errno = 0;
    char* end = nullptr;
    long x = std::strtol(v->c_str(), &end, 10);
    LOCKSTEP_ENFORCE(!v->empty() && errno == 0 && *end == '\0' && x >= 0, ValueError, "environment variable ",
                     name, "='", *v, "' is not a non-negative integer");
    return static_cast<int>(x);
  }
  int integer(const char* name, int def) const { return integer(name).value_or(def); }

 private:
  const EnvLookup& lookup_;
};

// "2(x3),1" -> 2: tasks on the first node, which is enough when every node runs the same count.
std::optional<int> firstTaskCount(const std::optional<std::string>& v) {
  if (!v || v->empty()) return std::nullopt;
  return std::atoi(v->c_str());
}

void masterFromEnv(const Reader& r, WorkerIdentity& id, bool single_host, const std::string& launcher) {
  if (auto a = r.str("MASTER_ADDR")) {
    id.master_addr = *a;
  } else {
    LOCKSTEP_ENFORCE(single_host, ValueError, "started by ", launcher,
                     " across several hosts but MASTER_ADDR is not set; export MASTER_ADDR=<host of rank 0> "
                     "(mpirun -x MASTER_ADDR=...)");
  }
  id.master_port = r.integer("MASTER_PORT", id.master_port);
}

}  // namespace

std::string firstSlurmHost(const std::string& nodelist) {
  std::string first = nodelist.substr(0, nodelist.find(','));
  auto open = nodelist.find('[');
  if (open == std::string::npos || open > first.size()) return first;
  // The comma may sit inside the brackets: "node[03-05,9]".
  std::string prefix = nodelist.substr(0, open);
  std::string range = nodelist.substr(open + 1);
  auto end = range.find_first_of("-,]");
  return prefix + range.substr(0, end);
}

WorkerIdentity workerIdentity(const EnvLookup& lookup) {
  Reader r(lookup);
  WorkerIdentity id;
  if (r.has("RANK") && r.has("WORLD_SIZE")) {
    id.rank = *r.integer("RANK");
    id.world_size = *r.integer("WORLD_SIZE");
    id.local_rank = r.integer("LOCAL_RANK", id.rank);
    id.local_world_size = r.integer("LOCAL_WORLD_SIZE", id.world_size);
    id.agent_store = r.has("LOCKSTEP_USE_AGENT_STORE") || r.str("TORCHELASTIC_USE_AGENT_STORE") == "True";
    id.store_prefix = r.str("LOCKSTEP_STORE_PREFIX").value_or("");
    id.restart_count = r.integer("LOCKSTEP_RESTART_COUNT", r.integer("TORCHELASTIC_RESTART_COUNT", 0));
    id.source = r.has("LOCKSTEP_RUN_ID") ? "lockstep run" : "torchrun";
    masterFromEnv(r, id, id.world_size == id.local_world_size, id.source);
  } else if (r.has("OMPI_COMM_WORLD_RANK")) {
    id.rank = *r.integer("OMPI_COMM_WORLD_RANK");
    id.world_size = r.integer("OMPI_COMM_WORLD_SIZE", 1);
    id.local_rank = r.integer("OMPI_COMM_WORLD_LOCAL_RANK", 0);
    id.local_world_size = r.integer("OMPI_COMM_WORLD_LOCAL_SIZE", id.world_size);
    id.source = "Open MPI";
    masterFromEnv(r, id, id.world_size == id.local_world_size, "mpirun");
  } else if (r.has("PMI_RANK")) {
    id.rank = *r.integer("PMI_RANK");
    id.world_size = r.integer("PMI_SIZE", 1);
    id.local_rank = r.integer("MPI_LOCALRANKID", 0);
    id.local_world_size = r.integer("MPI_LOCALNRANKS", id.world_size);
    id.source = "MPICH";
    masterFromEnv(r, id, id.world_size == id.local_world_size, "mpirun");
  } else if (r.has("SLURM_PROCID")) {
    id.rank = *r.integer("SLURM_PROCID");
    id.world_size = r.integer("SLURM_NTASKS", 1);
    id.local_rank = r.integer("SLURM_LOCALID", 0);
    id.local_world_size =
        firstTaskCount(r.str("SLURM_NTASKS_PER_NODE"))
            .value_or(firstTaskCount(r.str("SLURM_STEP_TASKS_PER_NODE")).value_or(id.world_size));
    id.source = "Slurm";
    // Jobs sharing a node must not share a port: derive it from the job id unless given.
    if (auto job = r.integer("SLURM_JOB_ID")) id.master_port = 20000 + *job % 10000;
    if (!r.has("MASTER_ADDR")) {
      auto nodes = r.str("SLURM_STEP_NODELIST");
      if (!nodes) nodes = r.str("SLURM_JOB_NODELIST");
      if (nodes && !nodes->empty()) id.master_addr = firstSlurmHost(*nodes);
    }
    masterFromEnv(r, id, true, "srun");
  } else {
    id.source = "single process";
    id.master_port = r.integer("MASTER_PORT", id.master_port);
    id.master_addr = r.str("MASTER_ADDR").value_or(id.master_addr);
  }
  LOCKSTEP_ENFORCE(id.world_size >= 1 && id.rank < id.world_size, ValueError, "rank ", id.rank,
                   " is not below the world size ", id.world_size, " (from ", id.source, "'s variables)");
  LOCKSTEP_ENFORCE(id.local_world_size >= 1 && id.local_rank < id.local_world_size, ValueError, "local rank ",
                   id.local_rank, " is not below the local world size ", id.local_world_size, " (from ",
                   id.source, "'s variables)");
  return id;
}

}  // namespace lockstep::launch
