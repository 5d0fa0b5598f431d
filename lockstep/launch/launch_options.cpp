#include "lockstep/launch/launch_options.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <functional>
#include <set>
#include <thread>

#include "lockstep/comm/worker_environment.h"
#include "lockstep/util/error.h"

namespace lockstep::launch {

namespace {

int parseInt(const std::string& flag, const std::string& v, int lo, int hi) {
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  LOCKSTEP_ENFORCE(!v.empty() && errno == 0 && *end == '\0' && x >= lo && x <= hi, ValueError, "option ",
                   flag, " expects an integer in [", lo, ", ", hi, "], got '", v, "'");
  return static_cast<int>(x);
}

double parseSeconds(const std::string& flag, const std::string& v) {
  errno = 0;
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  LOCKSTEP_ENFORCE(!v.empty() && errno == 0 && *end == '\0' && x > 0 && x < 1e7, ValueError, "option ", flag,
                   " expects a positive number of seconds, got '", v, "'");
  return x;
}

}  // namespace

int availableCores() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int parseNprocPerNode(const std::string& flag, const std::string& value, int cores) {
  if (value == "auto" || value == "cpu") return cores;
  LOCKSTEP_ENFORCE(value != "gpu", ValueError, "option ", flag,
                   "=gpu: this build of lockstep has no GPU support; use a number or auto");
  return parseInt(flag, value, 1, 1 << 16);
}

namespace {

using Setter = std::function<void(LaunchOptions&, const std::string& flag, const std::string& value)>;

struct Flag {
  std::vector<std::string> names;  // canonical dash spelling first
  std::string metavar;             // empty: a switch without a value
  std::string help;
  Setter set;
};

std::vector<Flag> flagTable(int cores) {
  // Built per call (it captures `cores`); parsing happens once per process.
  std::vector<Flag> table = {
      {{"--nproc-per-node"},
       "N|auto",
       "worker processes per node; auto: one per core (default 1)",
       [cores](LaunchOptions& o, const std::string& f, const std::string& v) {
         o.nproc_per_node = parseNprocPerNode(f, v, cores);
       }},
      {{"--oversubscribe"},
       "",
       "start --nproc-per-node ranks even where that is more than 4 per core or the memory holds",
       [](LaunchOptions& o, const std::string&, const std::string&) { o.oversubscribe = true; }},
      {{"--nnodes"},
       "N",
       "number of nodes (hosts) in the job (default 1)",
       [](LaunchOptions& o, const std::string& f, const std::string& v) {
         auto colon = v.find(':');
         if (colon == std::string::npos) {
           o.nnodes = parseInt(f, v, 1, 1 << 16);
           return;
         }
         int lo = parseInt(f, v.substr(0, colon), 1, 1 << 16);
         int hi = parseInt(f, v.substr(colon + 1), 1, 1 << 16);
         LOCKSTEP_ENFORCE(lo == hi, ValueError, "option ", f, "=", v,
                          ": elastic node ranges are not supported; give a fixed number of nodes");
         o.nnodes = lo;
       }},
      {{"--node-rank"},
       "R",
       "rank of this node; omitted: assigned by arrival order",
       [](LaunchOptions& o, const std::string& f, const std::string& v) {
         o.node_rank = parseInt(f, v, 0, 1 << 16);
       }},
      {{"--master-addr"},
       "HOST",
       "address of the master node (default 127.0.0.1)",
       [](LaunchOptions& o, const std::string& f, const std::string& v) {
         LOCKSTEP_ENFORCE(!v.empty(), ValueError, "option ", f, " needs a host name or address");
         o.master_addr = v;
       }},
      {{"--master-port"},
       "PORT",
       "port of the rendezvous store on the master (default 29500)",
       [](LaunchOptions& o, const std::string& f, const std::string& v) {
         o.master_port = parseInt(f, v, 1, 65535);
       }},
      {{"--standalone"},
       "",
       "single node; pick a free port for the rendezvous store",
       [](LaunchOptions& o, const std::string&, const std::string&) { o.standalone = true; }},
      {{"--rdzv-endpoint"},
       "HOST:PORT",
       "rendezvous store endpoint (instead of --master-addr/--master-port)",
       [](LaunchOptions& o, const std::string& f, const std::string& v) {
         auto [host, port] = parseEndpoint(f, v);
         o.master_addr = host;
         o.master_port = port;
       }},
      {{"--rdzv-backend"},
       "c10d|static",
       "accepted for torchrun compatibility; both use the agent's store",
       [](LaunchOptions&, const std::string& f, const std::string& v) {
         LOCKSTEP_ENFORCE(v == "c10d" || v == "static", ValueError, "option ", f, "=", v,
                          ": only c10d and static are supported");
       }},
      {{"--rdzv-id", "--run-id"},
       "ID",
       "job id shared by all nodes (default 'none'; --standalone: random)",
       [](LaunchOptions& o, const std::string& f, const std::string& v) {
         LOCKSTEP_ENFORCE(!v.empty() && v.find('/') == std::string::npos, ValueError, "option ", f,
                          " needs a non-empty id without '/'");
         o.run_id = v;
       }},
      {{"--rdzv-timeout"},
       "SEC",
       "seconds to wait for all nodes to arrive (default 900)",
       [](LaunchOptions& o, const std::string& f, const std::string& v) {
         o.rdzv_timeout_s = parseSeconds(f, v);
       }},
      {{"--max-restarts"},
       "N",
       "restarts of the whole group after a failure (default 0)",
       [](LaunchOptions& o, const std::string& f, const std::string& v) {
         o.max_restarts = parseInt(f, v, 0, 1 << 20);
       }},
      {{"--monitor-interval"},
       "SEC",
       "how often to poll for failures on other nodes (default 0.1)",
       [](LaunchOptions& o, const std::string& f, const std::string& v) {
         o.monitor_interval_s = parseSeconds(f, v);
       }},
      {{"--grace-period"},
       "SEC",
       "SIGTERM to SIGKILL delay when stopping workers (default 5)",
       [](LaunchOptions& o, const std::string& f, const std::string& v) {
         o.grace_period_s = parseSeconds(f, v);
       }},
      {{"--timeout"},
       "SEC",
       "collective timeout of the workers (LOCKSTEP_TIMEOUT) and of the watchdog that ends a job whose rank "
       "is stopped or hung or whose node is cut off (default: $LOCKSTEP_TIMEOUT, else 300)",
       [](LaunchOptions& o, const std::string& f, const std::string& v) {
         o.timeout_s = static_cast<double>(comm::parseTimeoutSeconds("option " + f, v).count()) / 1000.0;
       }},
      {{"--join-token"},
       "TOKEN",
       "secret every store client must prove it holds (default: $LOCKSTEP_JOIN_TOKEN; one node: a random "
       "one); prefer the variable, a flag is visible in ps",
       [](LaunchOptions& o, const std::string& f, const std::string& v) {
         LOCKSTEP_ENFORCE(v.size() >= 16, ValueError, "option ", f,
                          " needs a secret of at least 16 characters (e.g. `openssl rand -hex 32`)");
         o.join_token = v;
       }},
      {{"--log-dir"},
       "DIR",
       "write each rank's stdout/stderr to DIR/RUN_ID/attempt_K/RANK/",
       [](LaunchOptions& o, const std::string& f, const std::string& v) {
         LOCKSTEP_ENFORCE(!v.empty(), ValueError, "option ", f, " needs a directory");
         o.log_dir = v;
       }},
      {{"--redirects", "-r"},
       "MASK",
       "streams sent to log files only: 1 stdout, 2 stderr, 3 both, or 0:1,1:2",
       [](LaunchOptions& o, const std::string& f, const std::string& v) {
         o.redirects = parseStreamSelection(f, v);
       }},
      {{"--tee", "-t"},
       "MASK",
       "streams sent to log files and the console (same values as --redirects)",
       [](LaunchOptions& o, const std::string& f, const std::string& v) {
         o.tee = parseStreamSelection(f, v);
       }},
      {{"--hostfile"},
       "FILE",
       "'host slots=N' lines: print the command to run on each host, then exit",
       [](LaunchOptions& o, const std::string& f, const std::string& v) {
         LOCKSTEP_ENFORCE(!v.empty(), ValueError, "option ", f, " needs a file");
         o.hostfile = v;
       }},
      {{"--no-python"},
       "",
       "accepted for torchrun compatibility (PROGRAM is always run directly)",
       [](LaunchOptions&, const std::string&, const std::string&) {}},
      {{"--help", "-h"},
       "",
       "show this help",
       [](LaunchOptions& o, const std::string&, const std::string&) { o.help = true; }},
  };
  return table;
}

// "--nproc_per_node" -> "--nproc-per-node": torchrun accepts both spellings.
std::string canonical(std::string name) {
  for (size_t i = 2; i < name.size(); ++i)
    if (name[i] == '_') name[i] = '-';
  return name;
}

const Flag* findFlag(const std::vector<Flag>& table, const std::string& name) {
  for (const auto& f : table)
    for (const auto& n : f.names)
      if (n == name) return &f;
  return nullptr;
}

void validate(const LaunchOptions& o, const std::set<std::string>& given) {
  auto has = [&](const char* n) { return given.count(n) > 0; };
  auto conflict = [&](const char* a, const char* b) {
    LOCKSTEP_ENFORCE(!(has(a) && has(b)), ValueError, "options ", a, " and ", b, " conflict; give only one");
  };
  conflict("--rdzv-endpoint", "--master-addr");
  conflict("--rdzv-endpoint", "--master-port");
  conflict("--standalone", "--rdzv-endpoint");
  conflict("--standalone", "--master-addr");
  conflict("--standalone", "--master-port");
  conflict("--hostfile", "--nnodes");
  conflict("--hostfile", "--node-rank");
  conflict("--hostfile", "--standalone");
  conflict("--hostfile", "--nproc-per-node");
  conflict("--hostfile", "--master-addr");
  conflict("--hostfile", "--rdzv-endpoint");
  LOCKSTEP_ENFORCE(!(o.standalone && o.nnodes > 1), ValueError,
                   "option --standalone runs a single node but --nnodes is ", o.nnodes,
                   "; drop --standalone and give --rdzv-endpoint or --master-addr");
  LOCKSTEP_ENFORCE(!o.node_rank || *o.node_rank < o.nnodes, ValueError, "option --node-rank is ",
                   o.node_rank.value_or(0), " but --nnodes is ", o.nnodes, "; node ranks are 0..",
                   o.nnodes - 1);
  LOCKSTEP_ENFORCE(o.help || !o.program.empty(), ValueError,
                   "missing PROGRAM: give the program to run after the launcher options");
}

}  // namespace

int StreamSelection::forLocalRank(int local_rank) const {
  auto it = by_local_rank.find(local_rank);
  return it == by_local_rank.end() ? all : it->second;
}

StreamSelection parseStreamSelection(const std::string& flag, const std::string& value) {
  StreamSelection s;
  if (value.find(':') == std::string::npos) {
    s.all = parseInt(flag, value, 0, 3);
    return s;
  }
  size_t pos = 0;
  while (pos <= value.size()) {
    size_t comma = value.find(',', pos);
    std::string item = value.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    auto colon = item.find(':');
    LOCKSTEP_ENFORCE(colon != std::string::npos, ValueError, "option ", flag, "=", value,
                     ": expected LOCAL_RANK:MASK items like 0:1,1:3");
    s.by_local_rank[parseInt(flag, item.substr(0, colon), 0, 1 << 16)] =
        parseInt(flag, item.substr(colon + 1), 0, 3);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return s;
}

std::pair<std::string, int> parseEndpoint(const std::string& flag, const std::string& value) {
  std::string host;
  std::string port;
  if (!value.empty() && value[0] == '[') {
    auto close = value.find(']');
    LOCKSTEP_ENFORCE(close != std::string::npos, ValueError, "option ", flag, "=", value, ": unclosed '['");
    host = value.substr(1, close - 1);
    if (close + 1 < value.size()) {
      LOCKSTEP_ENFORCE(value[close + 1] == ':', ValueError, "option ", flag, "=", value,
                       ": expected [ADDR]:PORT");
      port = value.substr(close + 2);
    }
  } else {
    auto colon = value.rfind(':');
    host = value.substr(0, colon);
    if (colon != std::string::npos) port = value.substr(colon + 1);
  }
  LOCKSTEP_ENFORCE(!host.empty(), ValueError, "option ", flag, "=", value, ": expected HOST:PORT");
  return {host, port.empty() ? 29500 : parseInt(flag, port, 1, 65535)};
}

LaunchOptions parseLaunchArgs(const std::vector<std::string>& args, int cores) {
  const auto table = flagTable(cores);
  LaunchOptions o;
  std::set<std::string> given;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a.size() < 2 || a[0] != '-') break;  // the program
    std::string name = a;
    std::optional<std::string> value;
    auto eq = a.find('=');
    if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
    }
    name = canonical(name);
    const Flag* f = findFlag(table, name);
    LOCKSTEP_ENFORCE(f != nullptr, ValueError, "unknown option '", a, "'");
    const std::string& canon = f->names.front();
    if (f->metavar.empty()) {
      LOCKSTEP_ENFORCE(!value, ValueError, "option ", canon, " takes no value");
      value = "";
    } else if (!value) {
      LOCKSTEP_ENFORCE(i + 1 < args.size(), ValueError, "option ", canon, " needs a value (", f->metavar,
                       ")");
      value = args[++i];
    }
    f->set(o, canon, *value);
    given.insert(canon);
  }
  if (i < args.size()) {
    o.program = args[i];
    o.program_args.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
  }
  if (given.count("--rdzv-endpoint") == 0 && given.count("--master-port") == 0 && o.standalone)
    o.master_port = 0;
  if (o.standalone && given.count("--rdzv-id") == 0) o.run_id = "";  // the agent makes a random one
  validate(o, given);
  return o;
}

std::string launchUsage() {
  std::string u =
      "usage: lockstep run [OPTIONS] PROGRAM [ARGS...]\n\n"
      "Starts PROGRAM as --nproc-per-node worker processes on this node, with RANK, LOCAL_RANK,\n"
      "WORLD_SIZE, MASTER_ADDR, MASTER_PORT... set; supervises them and restarts the group on failure.\n"
      "Flags also accept torchrun's underscore spellings (--nproc_per_node) and --flag=value.\n\n"
      "options:\n";
  for (const auto& f : flagTable(1)) {
    std::string names;
    for (const auto& n : f.names) names += (names.empty() ? "" : ", ") + n;
    if (!f.metavar.empty()) names += " " + f.metavar;
    u += "  " + names;
    u += names.size() < 30 ? std::string(30 - names.size(), ' ') : "\n" + std::string(32, ' ');
    u += f.help + "\n";
  }
  return u;
}

}  // namespace lockstep::launch
