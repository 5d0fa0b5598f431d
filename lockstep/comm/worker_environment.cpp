#include "lockstep/comm/worker_environment.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "lockstep/util/env.h"
#include "lockstep/util/error.h"

namespace lockstep::comm {

namespace {

constexpr int kDefaultMasterPort = 29500;

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
    LOCKSTEP_ENFORCE(!v->empty() && errno == 0 && *end == '\0' && x >= 0 && x <= 1 << 30, ValueError,
                     "environment variable ", name, "='", *v, "' is not a non-negative integer");
    return static_cast<int>(x);
  }
  int integer(const char* name, int def) const { return integer(name).value_or(def); }
  std::optional<int> port(const char* name) const {
    auto v = integer(name);
    LOCKSTEP_ENFORCE(!v || (*v > 0 && *v < 65536), ValueError, name, "='", *str(name),
                     "' is not a valid TCP port (1..65535)");
    return v;
  }

 private:
  const EnvLookup& lookup_;
};

// "2(x3),1" -> 2: tasks on the first node, which is enough when every node runs the same count.
std::optional<int> firstTaskCount(const std::optional<std::string>& v) {
  if (!v || v->empty()) return std::nullopt;
  return std::atoi(v->c_str());
}

// mpirun / srun give no rendezvous address: on one host it is this host, across hosts the user
// must say where rank 0 runs.
void mpiStyleMaster(const Reader& r, WorkerEnvironment& e, bool single_host, const char* launcher) {
  if (auto a = r.str("MASTER_ADDR")) {
    e.master_addr = *a;
  } else if (e.master_addr.empty()) {
    LOCKSTEP_ENFORCE(single_host, ValueError, "started by ", launcher,
                     " across several hosts but MASTER_ADDR is not set; export MASTER_ADDR=<host of rank 0> "
                     "(mpirun -x MASTER_ADDR=...)");
    e.master_addr = "127.0.0.1";
  }
  e.master_port = r.port("MASTER_PORT").value_or(e.master_port > 0 ? e.master_port : kDefaultMasterPort);
}

// What each MPI launcher calls rank, size, local rank and local size.
struct MpiVariables {
  Launcher launcher;
  const char *rank, *size, *local_rank, *local_size;
};
constexpr MpiVariables kMpiLaunchers[] = {
    {Launcher::open_mpi, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {Launcher::mpich, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
};

const MpiVariables* mpiLauncherOf(const Reader& r) {
  for (const MpiVariables& m : kMpiLaunchers) {
    if (r.has(m.rank)) return &m;
  }
  return nullptr;
}

void nodesFromLocal(WorkerEnvironment& e) {
  e.node_rank = e.rank / e.local_world_size;
  e.num_nodes = (e.world_size + e.local_world_size - 1) / e.local_world_size;
}

}  // namespace

std::chrono::milliseconds parseTimeoutSeconds(const std::string& what, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  double s = std::strtod(text.c_str(), &end);
  LOCKSTEP_ENFORCE(!text.empty() && errno == 0 && *end == '\0' && std::isfinite(s) && s > 0 && s <= 864000,
                   ValueError, what, "='", text,
                   "' is not a timeout in seconds; give a positive number up to 864000 (ten days), e.g. 60");
  return std::chrono::milliseconds(std::max<int64_t>(1, static_cast<int64_t>(std::llround(s * 1000.0))));
}

const char* launcherName(Launcher l) {
  switch (l) {
    case Launcher::none:
      return "single process";
    case Launcher::lockstep_run:
      return "lockstep run";
    case Launcher::torchrun:
      return "torchrun";
    case Launcher::open_mpi:
      return "Open MPI";
    case Launcher::mpich:
      return "MPICH";
    case Launcher::slurm:
      return "Slurm";
  }
  return "?";
}

bool isMpiLauncher(Launcher l) { return l == Launcher::open_mpi || l == Launcher::mpich; }

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

WorkerEnvironment workerEnvironment(const EnvLookup& lookup) {
  Reader r(lookup);
  WorkerEnvironment e;
  if (r.has("RANK") || r.has("WORLD_SIZE")) {
    LOCKSTEP_ENFORCE(r.has("RANK"), ValueError,
                     "WORLD_SIZE is set but RANK is not: cannot tell this process's rank; set RANK too, or "
                     "start the job with lockstep run, torchrun, mpirun or srun");
    LOCKSTEP_ENFORCE(r.has("WORLD_SIZE"), ValueError,
                     "RANK is set but WORLD_SIZE is not: cannot tell the world size; set WORLD_SIZE too, or "
                     "start the job with lockstep run, torchrun, mpirun or srun");
    e.launcher = r.has("LOCKSTEP_RUN_ID") ? Launcher::lockstep_run : Launcher::torchrun;
    e.rank = *r.integer("RANK");
    e.world_size = *r.integer("WORLD_SIZE");
    e.local_rank = r.integer("LOCAL_RANK", e.rank);
    e.local_world_size = r.integer("LOCAL_WORLD_SIZE", e.world_size);
    e.node_rank = r.integer("GROUP_RANK", 0);
    e.num_nodes = r.integer("GROUP_WORLD_SIZE", 1);
    auto agent = r.str("LOCKSTEP_USE_AGENT_STORE");
    e.agent_store = (agent && env::parseBool("LOCKSTEP_USE_AGENT_STORE", *agent)) ||
                    r.str("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True";
    e.store_prefix = r.str("LOCKSTEP_STORE_PREFIX").value_or("");
    e.restart_count = r.integer("LOCKSTEP_RESTART_COUNT", r.integer("TORCHELASTIC_RESTART_COUNT", 0));
    e.max_restarts = r.integer("LOCKSTEP_MAX_RESTARTS", r.integer("TORCHELASTIC_MAX_RESTARTS", 0));
    e.run_id = r.str("LOCKSTEP_RUN_ID").value_or(r.str("TORCHELASTIC_RUN_ID").value_or(""));
    e.error_file = r.str("LOCKSTEP_ERROR_FILE").value_or(r.str("TORCHELASTIC_ERROR_FILE").value_or(""));
    // As torch: a RANK/WORLD_SIZE job names its rendezvous (torchrun always does).
    e.master_addr = r.str("MASTER_ADDR").value_or("");
    e.master_port = r.port("MASTER_PORT").value_or(0);
    e.store_addr = r.str("LOCKSTEP_STORE_ADDR").value_or(e.master_addr);
    e.store_port = r.port("LOCKSTEP_STORE_PORT").value_or(e.master_port);
  } else if (const MpiVariables* mpi = mpiLauncherOf(r)) {
    e.launcher = mpi->launcher;
    e.rank = *r.integer(mpi->rank);
    e.world_size = r.integer(mpi->size, 1);
    e.local_rank = r.integer(mpi->local_rank, 0);
    e.local_world_size = r.integer(mpi->local_size, e.world_size);
  } else if (r.has("SLURM_PROCID")) {
    e.launcher = Launcher::slurm;
    e.rank = *r.integer("SLURM_PROCID");
    e.world_size = r.integer("SLURM_NTASKS", 1);
    e.local_rank = r.integer("SLURM_LOCALID", 0);
    e.local_world_size =
        firstTaskCount(r.str("SLURM_NTASKS_PER_NODE"))
            .value_or(firstTaskCount(r.str("SLURM_STEP_TASKS_PER_NODE")).value_or(e.world_size));
    e.node_rank = r.integer("SLURM_NODEID", 0);
    e.num_nodes = r.integer("SLURM_NNODES", r.integer("SLURM_JOB_NUM_NODES", 1));
    e.restart_count = r.integer("SLURM_RESTART_COUNT", 0);
    e.run_id = r.str("SLURM_JOB_ID").value_or("");
    // Jobs sharing a node must not share a port: derive it from the job id unless given.
    if (auto job = r.integer("SLURM_JOB_ID")) e.master_port = 20000 + *job % 10000;
    if (!r.has("MASTER_ADDR")) {
      auto nodes = r.str("SLURM_STEP_NODELIST");
      if (!nodes) nodes = r.str("SLURM_JOB_NODELIST");
      if (nodes && !nodes->empty()) e.master_addr = firstSlurmHost(*nodes);
    }
    mpiStyleMaster(r, e, true, "srun");
  } else {
    e.master_addr = r.str("MASTER_ADDR").value_or("");
    e.master_port = r.port("MASTER_PORT").value_or(0);
  }
  if (isMpiLauncher(e.launcher)) {
    mpiStyleMaster(r, e, e.world_size == e.local_world_size, "mpirun");
    nodesFromLocal(e);
  }
  if (auto t = r.str("LOCKSTEP_TIMEOUT"))
    e.timeout = parseTimeoutSeconds("environment variable LOCKSTEP_TIMEOUT", *t);
  e.join_token = r.str("LOCKSTEP_JOIN_TOKEN").value_or("");
  const char* name = launcherName(e.launcher);
  LOCKSTEP_ENFORCE(e.world_size >= 1, ValueError, "the world size is ", e.world_size, " (from ", name,
                   "'s variables); it must be at least 1");
  LOCKSTEP_ENFORCE(e.rank < e.world_size, ValueError, "RANK=", e.rank, " is out of range for world size ",
                   e.world_size, " (from ", name, "'s variables; need 0 <= rank < world size)");
  LOCKSTEP_ENFORCE(e.local_world_size >= 1 && e.local_rank < e.local_world_size, ValueError, "local rank ",
                   e.local_rank, " is not below the local world size ", e.local_world_size, " (from ", name,
                   "'s variables)");
  LOCKSTEP_ENFORCE(e.num_nodes >= 1 && e.node_rank < e.num_nodes, ValueError, "node rank ", e.node_rank,
                   " is not below the number of nodes ", e.num_nodes, " (from ", name, "'s variables)");
  return e;
}

const std::vector<std::string>& workerVariableNames() {
  static const std::vector<std::string> names = {"RANK",
                                                 "LOCAL_RANK",
                                                 "WORLD_SIZE",
                                                 "LOCAL_WORLD_SIZE",
                                                 "GROUP_RANK",
                                                 "GROUP_WORLD_SIZE",
                                                 "ROLE_NAME",
                                                 "ROLE_RANK",
                                                 "ROLE_WORLD_SIZE",
                                                 "MASTER_ADDR",
                                                 "MASTER_PORT",
                                                 "LOCKSTEP_RUN_ID",
                                                 "LOCKSTEP_RESTART_COUNT",
                                                 "LOCKSTEP_MAX_RESTARTS",
                                                 "LOCKSTEP_USE_AGENT_STORE",
                                                 "LOCKSTEP_STORE_ADDR",
                                                 "LOCKSTEP_STORE_PORT",
                                                 "LOCKSTEP_STORE_PREFIX",
                                                 "LOCKSTEP_ERROR_FILE",
                                                 "LOCKSTEP_TIMEOUT",
                                                 "LOCKSTEP_JOIN_TOKEN",
                                                 "TORCHELASTIC_RUN_ID",
                                                 "TORCHELASTIC_RESTART_COUNT",
                                                 "TORCHELASTIC_MAX_RESTARTS",
                                                 "TORCHELASTIC_USE_AGENT_STORE",
                                                 "TORCHELASTIC_ERROR_FILE"};
  return names;
}

std::map<std::string, std::string> workerVariables(const WorkerEnvironment& e) {
  std::map<std::string, std::string> v;
  auto num = [](int x) { return std::to_string(x); };
  v["RANK"] = num(e.rank);
  v["LOCAL_RANK"] = num(e.local_rank);
  v["WORLD_SIZE"] = num(e.world_size);
  v["LOCAL_WORLD_SIZE"] = num(e.local_world_size);
  v["GROUP_RANK"] = num(e.node_rank);
  v["GROUP_WORLD_SIZE"] = num(e.num_nodes);
  v["ROLE_NAME"] = "default";
  v["ROLE_RANK"] = num(e.rank);
  v["ROLE_WORLD_SIZE"] = num(e.world_size);
  if (!e.master_addr.empty()) v["MASTER_ADDR"] = e.master_addr;
  if (e.master_port > 0) v["MASTER_PORT"] = num(e.master_port);
  v["LOCKSTEP_RUN_ID"] = e.run_id;
  v["LOCKSTEP_RESTART_COUNT"] = num(e.restart_count);
  v["LOCKSTEP_MAX_RESTARTS"] = num(e.max_restarts);
  v["TORCHELASTIC_RUN_ID"] = e.run_id;
  v["TORCHELASTIC_RESTART_COUNT"] = num(e.failure_restarts.value_or(e.restart_count));
  v["TORCHELASTIC_MAX_RESTARTS"] = num(e.max_restarts);
  if (e.agent_store) {
    // The agent hosts lockstep's store for the whole job: lockstep's workers connect to it as
    // clients (rank 0 too). PyTorch cannot speak its protocol, so PyTorch's env:// is told to host
    // its own TCPStore in rank 0 on MASTER_PORT, as torchrun's c10d rendezvous does.
    v["LOCKSTEP_USE_AGENT_STORE"] = "1";
    if (!e.store_addr.empty()) v["LOCKSTEP_STORE_ADDR"] = e.store_addr;
    if (e.store_port > 0) v["LOCKSTEP_STORE_PORT"] = num(e.store_port);
    v["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  }
  if (!e.store_prefix.empty()) v["LOCKSTEP_STORE_PREFIX"] = e.store_prefix;
  if (!e.error_file.empty()) {
    v["LOCKSTEP_ERROR_FILE"] = e.error_file;
    v["TORCHELASTIC_ERROR_FILE"] = e.error_file;
  }
  if (e.timeout) {
    std::ostringstream os;
    os << static_cast<double>(e.timeout->count()) / 1000.0;  // "20", "0.5"
    v["LOCKSTEP_TIMEOUT"] = os.str();
  }
  if (!e.join_token.empty()) v["LOCKSTEP_JOIN_TOKEN"] = e.join_token;
  return v;
}

}  // namespace lockstep::comm
