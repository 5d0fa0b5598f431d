#include "lockstep/comm/init.h"

#include <charconv>

#include "lockstep/comm/backend_registry.h"
#include "lockstep/comm/store/file_store.h"
#include "lockstep/comm/store/prefix_store.h"
#include "lockstep/comm/store/tcp_store.h"
#include "lockstep/util/env.h"
#include "lockstep/util/error.h"

namespace lockstep::comm {

using ::lockstep::detail::concat;

namespace {

uint16_t parsePort(const std::string& s, const std::string& what) {
  int port = -1;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), port);
  LOCKSTEP_ENFORCE(ec == std::errc() && p == s.data() + s.size() && port > 0 && port < 65536, ValueError,
                   what, "='", s, "' is not a valid TCP port (1..65535)");
  return static_cast<uint16_t>(port);
}

}  // namespace

std::chrono::milliseconds collectiveTimeout(const InitOptions& o, const WorkerEnvironment& env) {
  if (o.timeout > kGroupTimeout) return o.timeout;
  return env.timeout.value_or(kDefaultCollectiveTimeout);
}

ResolvedInit resolveInit(const InitOptions& o) {
  const Backend& backend = findBackend(o.backend);
  ResolvedInit r;
  r.env = workerEnvironment();
  const WorkerEnvironment& w = r.env;
  const bool launched = w.launcher != Launcher::none;
  if (o.rank >= 0) {
    r.rank = o.rank;
  } else if (launched) {
    r.rank = w.rank;
  } else if (backend.needs_store) {
    throw ValueError(
        "cannot tell this process's rank: RANK is not set (nor OMPI_COMM_WORLD_RANK or "
        "SLURM_PROCID); set RANK, start the job with lockstep run, mpirun or srun, or "
        "pass InitOptions.rank");
  }
  if (o.world_size > 0) {
    r.world_size = o.world_size;
  } else if (launched) {
    r.world_size = w.world_size;
  } else if (backend.needs_store) {
    throw ValueError(
        "cannot tell the world size: WORLD_SIZE is not set (nor OMPI_COMM_WORLD_SIZE or "
        "SLURM_NTASKS); set WORLD_SIZE, or pass InitOptions.world_size");
  }
  LOCKSTEP_ENFORCE(r.world_size >= 1, ValueError, "world size ", r.world_size, " must be at least 1");
  LOCKSTEP_ENFORCE(r.rank >= 0 && r.rank < r.world_size, ValueError, "RANK=", r.rank,
                   " is out of range for world size ", r.world_size, " (need 0 <= rank < world size)");
  if (launched) r.local_rank = w.local_rank;

  const std::string& m = o.init_method;
  if (!backend.needs_store) {
    // MPI forms its world from mpirun: without it every process would be a world of one alone,
    // and a job the environment says has several ranks would synchronise nothing.
    LOCKSTEP_ENFORCE(r.world_size <= 1 || isMpiLauncher(w.launcher), ValueError, "backend ", backend.name,
                     " cannot form the world this process was given: ", launcherName(w.launcher),
                     " says WORLD_SIZE=", r.world_size,
                     ", but MPI takes its world from mpirun and this process "
                     "was not started by mpirun (each rank would be a world of 1); start the job with "
                     "`mpirun -np ",
                     r.world_size, " PROGRAM`, or use backend shm, gloo or auto");
    r.store_kind = "none";
  } else if (m == "env://") {
    LOCKSTEP_ENFORCE(!w.master_addr.empty(), ValueError,
                     "init_method env:// needs MASTER_ADDR (the host of rank 0 or of the launcher); "
                     "it is not set");
    LOCKSTEP_ENFORCE(w.master_port > 0, ValueError,
                     "init_method env:// needs MASTER_PORT (e.g. 29500); it is not set");
    r.store_kind = "tcp";
    r.host = w.agent_store ? w.store_addr : w.master_addr;
    r.port = static_cast<uint16_t>(w.agent_store ? w.store_port : w.master_port);
  } else if (m.rfind("tcp://", 0) == 0) {
    std::string rest = m.substr(6);
    auto colon = rest.rfind(':');
    LOCKSTEP_ENFORCE(colon != std::string::npos && colon > 0, ValueError, "init_method '", m,
                     "' is malformed; expected tcp://HOST:PORT");
    r.store_kind = "tcp";
    r.host = rest.substr(0, colon);
    if (r.host.size() > 2 && r.host.front() == '[' && r.host.back() == ']')
      r.host = r.host.substr(1, r.host.size() - 2);
    r.port = parsePort(rest.substr(colon + 1), "init_method port");
  } else if (m.rfind("file://", 0) == 0) {
    r.store_kind = "file";
    r.path = m.substr(7);
    LOCKSTEP_ENFORCE(!r.path.empty(), ValueError, "init_method '", m,
                     "' names no file; expected file:///path");
  } else {
    throw ValueError(
        concat("init_method '", m, "' is not understood; use env://, tcp://HOST:PORT or file:///PATH"));
  }
  // Under `lockstep run` (or torchrun) the agent hosts the store: rank 0 must not bind the port.
  r.host_store_server = r.store_kind == "tcp" && r.rank == 0 && !w.agent_store;
  r.key_prefix = w.store_prefix;
  return r;
}

std::shared_ptr<Store> createStore(const ResolvedInit& r, const InitOptions& o) {
  const auto store_timeout = o.store_timeout > kGroupTimeout ? o.store_timeout : collectiveTimeout(o, r.env);
  std::shared_ptr<Store> base;
  if (r.store_kind == "tcp") {
    TCPStoreOptions t;
    t.host = r.host;
    t.port = r.port;
    t.is_server = r.host_store_server;
    t.timeout = store_timeout;
    t.join_token = r.env.join_token;
    try {
      base = std::make_shared<TCPStore>(t);
    } catch (const TimeoutError& e) {
      const bool agents = r.env.agent_store;
      throw TimeoutError(concat(
          "rank ", r.rank, " of ", r.world_size, " could not reach ", agents ? "the launcher's" : "rank 0's",
          " store within ", static_cast<double>(store_timeout.count()) / 1000.0, " s: ", e.what(),
          agents ? "" : "; rank 0 may never have started (its pod not scheduled) or have ended",
          ". The wait is the group's timeout (a config's comm_timeout_seconds, `lockstep run --timeout`, "
          "LOCKSTEP_TIMEOUT): raise it where ranks start far apart"));
    }
  } else if (r.store_kind == "file") {
    base = std::make_shared<FileStore>(r.path, r.world_size);
    base->setTimeout(store_timeout);
  } else {
    return nullptr;
  }
  // The launcher gives every restart attempt its own prefix, so no attempt sees stale keys.
  return std::make_shared<PrefixStore>(r.key_prefix + o.group_name, base);
}

std::shared_ptr<ProcessGroup> createProcessGroup(const std::string& backend, std::shared_ptr<Store> store,
                                                 int rank, int size, std::chrono::milliseconds timeout) {
  return findBackend(backend).create(std::move(store), rank, size, timeout);
}

std::shared_ptr<ProcessGroup> initProcessGroup(const InitOptions& options) {
  const Backend& backend = findBackend(options.backend);
  ResolvedInit r = resolveInit(options);
  auto store = createStore(r, options);
  return backend.create(store, r.rank, r.world_size, collectiveTimeout(options, r.env));
}

}  // namespace lockstep::comm
