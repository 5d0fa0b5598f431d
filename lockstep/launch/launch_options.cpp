#include "lockstep/launch/launch_options.h"

#include <sched.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <functional>
#include <optional>
#include <set>
#include <thread>

#include "lockstep/comm/worker_environment.h"
#if LOCKSTEP_WITH_CUDA
#include "lockstep/comm/nccl/nccl_util.h"
#endif
#include "lockstep/util/env.h"
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

int visibleGpus() {
#if LOCKSTEP_WITH_CUDA
  return comm::nccl::visibleDeviceCount();
#else
  return 0;
#endif
}

int parseNprocPerNode(const std::string& flag, const std::string& value, int cores, int gpus) {
  if (value == "cpu") return cores;
  if (value == "auto") return gpus > 0 ? gpus : cores;
  if (value == "gpu") {
    LOCKSTEP_ENFORCE(gpus > 0, ValueError, "option ", flag, "=gpu: ",
#if LOCKSTEP_WITH_CUDA
                     "this host shows no CUDA GPU (no device, no driver, or CUDA_VISIBLE_DEVICES hides them)",
#else
                     "this build of lockstep has no GPU support (built without the CUDA toolkit)",
#endif
                     "; use a number, cpu or auto");
    return gpus;
  }
  return parseInt(flag, value, 1, 1 << 16);
}

namespace {

// Sets one field of LaunchOptions from a flag's value; `flag` is its dash spelling, for messages.
using Setter = std::function<void(const std::string& flag, const std::string& value)>;

// CLI11 names for `names` (the dash spelling first) plus torchrun's underscore twin of each long
// one: "--nproc-per-node,--nproc_per_node".
std::string withUnderscoreTwins(std::initializer_list<std::string> names) {
  std::string out;
  for (const auto& n : names) {
    out += (out.empty() ? "" : ",") + n;
    std::string twin = n;
    if (twin.rfind("--", 0) == 0) std::replace(twin.begin() + 2, twin.end(), '-', '_');
    if (twin != n) out += "," + twin;
  }
  return out;
}

// A flag that takes a value (METAVAR in the help).
void option(CLI::App& app, std::initializer_list<std::string> names, const std::string& metavar,
            const std::string& help, Setter set) {
  const std::string flag = *names.begin();
  app.add_option_function<std::string>(
         withUnderscoreTwins(names), [flag, set](const std::string& v) { set(flag, v); }, help)
      ->type_name(metavar);
}

// A switch: no value (`--switch=value` is refused in splitEqualsForms).
void flag(CLI::App& app, std::initializer_list<std::string> names, const std::string& help,
          std::function<void()> set) {
  app.add_flag_callback(withUnderscoreTwins(names), std::move(set), help);
}

// --rdzv-timeout and --rdzv-conf's join_timeout are one setting: either, not both.
void setRendezvousTimeout(LaunchOptions& o, const std::string& source, double seconds) {
  LOCKSTEP_ENFORCE(o.rdzv_timeout_source.empty() || o.rdzv_timeout_source == source, ValueError, "options ",
                   o.rdzv_timeout_source, " and ", source, " both set the rendezvous timeout; give only one");
  o.rdzv_timeout_source = source;
  o.rdzv_timeout_s = seconds;
}

// torchrun's --rdzv-conf "key=value,key=value". Only the keys that mean something here are taken;
// any other is an error rather than a setting silently dropped.
void parseRendezvousConf(const std::string& flag, const std::string& value, LaunchOptions& o) {
  size_t pos = 0;
  while (pos < value.size()) {
    size_t comma = value.find(',', pos);
    const std::string item = value.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? value.size() : comma + 1;
    if (item.empty()) continue;
    const auto eq = item.find('=');
    LOCKSTEP_ENFORCE(eq != std::string::npos, ValueError, "option ", flag, "=", value, ": '", item,
                     "' is not KEY=VALUE");
    const std::string key = item.substr(0, eq), v = item.substr(eq + 1);
    if (key == "join_timeout") {
      setRendezvousTimeout(o, flag + " join_timeout", parseSeconds(flag + " join_timeout", v));
    } else if (key == "last_call_timeout") {
      o.last_call_timeout_s = parseSeconds(flag + " last_call_timeout", v);
    } else {
      throw ValueError(::lockstep::detail::concat(
          "option ", flag, ": unknown key '", key,
          "'; lockstep run takes join_timeout and last_call_timeout (the others of torchrun's c10d "
          "rendezvous have no counterpart here: heartbeats are --heartbeat-timeout)"));
    }
  }
}

// Every flag of `lockstep run`, writing into o; `cores` resolves --nproc-per-node auto.
void addFlags(CLI::App& app, LaunchOptions& o, int cores) {
  option(app, {"--nproc-per-node"}, "N|auto|cpu|gpu",
         "worker processes per node; cpu: one per core; gpu: one per visible GPU; auto: one per GPU, or per "
         "core without one (default 1)",
         [&o, cores](const std::string& f, const std::string& v) {
           o.nproc_per_node = parseNprocPerNode(f, v, cores, v == "gpu" || v == "auto" ? visibleGpus() : 0);
         });
  flag(app, {"--oversubscribe"},
       "start --nproc-per-node ranks even where that is more than 4 per core or the memory holds",
       [&o] { o.oversubscribe = true; });
  option(app, {"--nnodes"}, "N|MIN:MAX",
         "number of nodes (hosts) in the job, or an elastic range: the job starts with MIN and admits "
         "nodes up to MAX, re-forming when one joins or is lost (default 1)",
         [&o](const std::string& f, const std::string& v) {
           auto colon = v.find(':');
           if (colon == std::string::npos) {
             o.nnodes = o.min_nodes = parseInt(f, v, 1, 1 << 16);
             return;
           }
           int lo = parseInt(f, v.substr(0, colon), 1, 1 << 16);
           int hi = parseInt(f, v.substr(colon + 1), 1, 1 << 16);
           LOCKSTEP_ENFORCE(lo <= hi, ValueError, "option ", f, "=", v,
                            ": the minimum number of nodes is larger than the maximum; give MIN:MAX");
           o.min_nodes = lo;
           o.nnodes = hi;
         });
  option(app, {"--node-rank"}, "R", "rank of this node; omitted: assigned by arrival order",
         [&o](const std::string& f, const std::string& v) { o.node_rank = parseInt(f, v, 0, 1 << 16); });
  option(app, {"--master-addr"}, "HOST", "address of the master node (default 127.0.0.1)",
         [&o](const std::string& f, const std::string& v) {
           LOCKSTEP_ENFORCE(!v.empty(), ValueError, "option ", f, " needs a host name or address");
           o.master_addr = v;
         });
  option(app, {"--master-port"}, "PORT", "port of the rendezvous store on the master (default 29500)",
         [&o](const std::string& f, const std::string& v) { o.master_port = parseInt(f, v, 1, 65535); });
  flag(app, {"--standalone"}, "single node; pick a free port for the rendezvous store",
       [&o] { o.standalone = true; });
  option(app, {"--rdzv-endpoint"}, "HOST[:PORT]",
         "rendezvous store endpoint (instead of --master-addr/--master-port; port 29400 by default, as "
         "torchrun's "
         "c10d)",
         [&o](const std::string& f, const std::string& v) {
           auto [host, port] = parseEndpoint(f, v);
           o.master_addr = host;
           o.master_port = port;
         });
  option(app, {"--rdzv-backend"}, "c10d|static",
         "accepted for torchrun compatibility; both use the agent's store",
         [](const std::string& f, const std::string& v) {
           LOCKSTEP_ENFORCE(v == "c10d" || v == "static", ValueError, "option ", f, "=", v,
                            ": only c10d and static are supported");
         });
  option(app, {"--start-method"}, "spawn|fork|forkserver",
         "accepted for torchrun compatibility: each worker is a new process running PROGRAM whichever is "
         "given, as torchrun's workers for a script (it uses the method for Python functions only)",
         [](const std::string& f, const std::string& v) {
           LOCKSTEP_ENFORCE(v == "spawn" || v == "fork" || v == "forkserver", ValueError, "option ", f, "=",
                            v, ": expected spawn, fork or forkserver (torchrun's choices)");
         });
  option(app, {"--rdzv-id", "--run-id"}, "ID",
         "job id shared by all nodes (default 'none'; --standalone: random)",
         [&o](const std::string& f, const std::string& v) {
           LOCKSTEP_ENFORCE(!v.empty() && v.find('/') == std::string::npos, ValueError, "option ", f,
                            " needs a non-empty id without '/'");
           o.run_id = v;
         });
  option(
      app, {"--rdzv-timeout"}, "SEC", "seconds to wait for all nodes (elastic: MIN) to arrive (default 900)",
      [&o](const std::string& f, const std::string& v) { setRendezvousTimeout(o, f, parseSeconds(f, v)); });
  option(app, {"--rdzv-conf"}, "KEY=VALUE,...",
         "rendezvous settings, as torchrun's: join_timeout (same as --rdzv-timeout), last_call_timeout "
         "(elastic: how long a round waits for more nodes once MIN are there; default 30)",
         [&o](const std::string& f, const std::string& v) { parseRendezvousConf(f, v, o); });
  option(app, {"--max-restarts"}, "N", "restarts of the whole group after a failure (default 0)",
         [&o](const std::string& f, const std::string& v) { o.max_restarts = parseInt(f, v, 0, 1 << 20); });
  option(app, {"--monitor-interval"}, "SEC", "how often to poll for failures on other nodes (default 0.1)",
         [&o](const std::string& f, const std::string& v) { o.monitor_interval_s = parseSeconds(f, v); });
  option(app, {"--grace-period"}, "SEC", "SIGTERM to SIGKILL delay when stopping workers (default 5)",
         [&o](const std::string& f, const std::string& v) { o.grace_period_s = parseSeconds(f, v); });
  option(
      app, {"--timeout"}, "SEC",
      "collective timeout of the workers (LOCKSTEP_TIMEOUT) and of the watchdog that ends a job whose rank "
      "is stopped or hung or whose node is cut off (default: $LOCKSTEP_TIMEOUT, else 300)",
      [&o](const std::string& f, const std::string& v) {
        o.timeout_s = static_cast<double>(comm::parseTimeoutSeconds("option " + f, v).count()) / 1000.0;
      });
  option(
      app, {"--heartbeat-timeout"}, "SEC",
      "seconds another node may send no heartbeat (the master's store, for half of it, answer no call) "
      "before the job is ended naming it: a cut network, a dead host (default: $LOCKSTEP_HEARTBEAT_TIMEOUT, "
      "else 30; at most --timeout)",
      [&o](const std::string& f, const std::string& v) {
        o.heartbeat_timeout_s =
            static_cast<double>(comm::parseTimeoutSeconds("option " + f, v).count()) / 1000.0;
      });
  option(app, {"--join-token"}, "TOKEN",
         "secret every store client must prove it holds (default: $LOCKSTEP_JOIN_TOKEN; one node: a random "
         "one); prefer the variable, a flag is visible in ps",
         [&o](const std::string& f, const std::string& v) {
           LOCKSTEP_ENFORCE(v.size() >= 16, ValueError, "option ", f,
                            " needs a secret of at least 16 characters (e.g. `openssl rand -hex 32`)");
           o.join_token = v;
         });
  option(app, {"--log-dir"}, "DIR", "write each rank's stdout/stderr to DIR/RUN_ID/attempt_K/RANK/",
         [&o](const std::string& f, const std::string& v) {
           LOCKSTEP_ENFORCE(!v.empty(), ValueError, "option ", f, " needs a directory");
           o.log_dir = v;
         });
  option(app, {"--redirects", "-r"}, "MASK",
         "streams sent to log files only: 1 stdout, 2 stderr, 3 both, or 0:1,1:2",
         [&o](const std::string& f, const std::string& v) { o.redirects = parseStreamSelection(f, v); });
  option(app, {"--tee", "-t"}, "MASK",
         "streams sent to log files and the console (same values as --redirects)",
         [&o](const std::string& f, const std::string& v) { o.tee = parseStreamSelection(f, v); });
  option(app, {"--hostfile"}, "FILE",
         "'host slots=N' lines: print the command to run on each host, then exit",
         [&o](const std::string& f, const std::string& v) {
           LOCKSTEP_ENFORCE(!v.empty(), ValueError, "option ", f, " needs a file");
           o.hostfile = v;
         });
  flag(app, {"--module", "-m"}, "PROGRAM is a Python module: each worker runs python3 -u -m PROGRAM",
       [&o] { o.module = true; });
  flag(app, {"--no-python"}, "run PROGRAM directly, also a .py script (default: python3 -u PROGRAM.py)",
       [&o] { o.no_python = true; });
  // Our own help flag rather than CLI11's: --help only sets LaunchOptions::help, the caller prints.
  flag(app, {"--help", "-h"}, "show this help", [&o] { o.help = true; });
}

// The help in argparse's layout, as torchrun's: usage, what it does, one line per flag under its
// dash spelling (the underscore twins are said once in the description).
class UsageFormatter : public CLI::Formatter {
 public:
  std::string make_help(const CLI::App* app, std::string name, CLI::AppFormatMode mode) const override {
    return make_usage(app, name) + "\n" + app->get_description() + make_groups(app, mode);
  }
  std::string make_usage(const CLI::App*, std::string name) const override {
    return "usage: " + name + " [OPTIONS] PROGRAM [ARGS...]\n";
  }
  std::string make_option_name(const CLI::Option* opt, bool) const override {
    std::string names;
    for (const auto& s : opt->get_snames()) names += (names.empty() ? "-" : ", -") + s;
    for (const auto& l : opt->get_lnames())
      if (l.find('_') == std::string::npos) names += (names.empty() ? "--" : ", --") + l;
    return names;
  }
};

// The command line of `lockstep run`: the flags, then PROGRAM and its arguments, which CLI11 takes
// as positionals: positionals_at_end() makes everything from PROGRAM on one of them, whatever it
// looks like.
struct LaunchApp {
  CLI::App app{
      "Starts PROGRAM as --nproc-per-node worker processes on this node, with RANK, LOCAL_RANK,\n"
      "WORLD_SIZE, MASTER_ADDR, MASTER_PORT... set; supervises them and restarts the group on failure.\n"
      "Flags also accept torchrun's underscore spellings (--nproc_per_node) and --flag=value; as\n"
      "torchrun's, each takes its default from PET_<FLAG> (PET_NNODES, PET_MASTER_ADDR, ...).\n",
      "lockstep run"};
  LaunchApp(LaunchOptions& o, int cores) {
    app.set_help_flag();
    app.formatter(std::make_shared<UsageFormatter>());
    app.get_formatter()->column_width(32);
    app.allow_extras();  // unknown flags are collected and reported in our words (parseLaunchArgs)
    app.positionals_at_end();
    // A flag given twice: the last one counts, as in torchrun.
    app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)->group("options");
    addFlags(app, o, cores);
    app.add_option("program", o.program)->group("");
    app.add_option("args", o.program_args)->group("");
  }
  /// Whether flag `name` is on the command line (not just in the environment).
  bool given(const std::string& name) const {
    return app.get_option(name)->count() > 0 && from_env.count(name) == 0;
  }
  std::set<std::string> from_env;  ///< Flags whose value came from PET_*.
  /// PET_RDZV_CONF's join_timeout, set aside because --rdzv-timeout is on the command line.
  std::string env_join_timeout_dropped;
};

// Pairs of flags that say the same thing two ways; giving both is an error.
constexpr std::pair<const char*, const char*> kConflicts[] = {
    {"--rdzv-endpoint", "--master-addr"}, {"--rdzv-endpoint", "--master-port"},
    {"--standalone", "--rdzv-endpoint"},  {"--standalone", "--master-addr"},
    {"--standalone", "--master-port"},    {"--hostfile", "--nnodes"},
    {"--hostfile", "--node-rank"},        {"--hostfile", "--standalone"},
    {"--hostfile", "--nproc-per-node"},   {"--hostfile", "--master-addr"},
    {"--hostfile", "--rdzv-endpoint"},
};

// The flags torchrun has, each defaulting to PET_<ITS NAME> (torch/distributed/argparse_util.py's
// env and check_env actions); --standalone first and --rdzv-endpoint before --master-addr/-port,
// because those make the later ones moot (as torchrun's c10d rendezvous ignores the master's).
constexpr const char* kTorchrunFlags[] = {
    "--standalone",       "--rdzv-endpoint", "--master-addr",  "--master-port", "--nproc-per-node",
    "--nnodes",           "--node-rank",     "--rdzv-backend", "--rdzv-id",     "--max-restarts",
    "--monitor-interval", "--log-dir",       "--redirects",    "--tee",         "--module",
    "--no-python",        "--rdzv-conf",     "--start-method",
};

// torchrun's flags lockstep run does not take, and why: named in the error instead of "unknown".
constexpr std::pair<const char*, const char*> kTorchrunOnlyFlags[] = {
    {"--role", "every worker has the one role 'default'"},
    {"--local-addr", "each node's address toward the master is found by routing"},
    {"--local-ranks-filter",
     "every rank's output reaches the console; --redirects and --tee choose per rank"},
    {"--logs-specs", "the log files are --log-dir's"},
    {"--log-line-prefix-template", "console lines are prefixed with the rank"},
    {"--run-path", "give the script itself as PROGRAM, or -m MODULE"},
    {"--event-log-handler", "the launcher's events are its log lines and the failure report"},
    {"--duplicate-stdout-filters", "--tee and --redirects choose what reaches the files"},
    {"--duplicate-stderr-filters", "--tee and --redirects choose what reaches the files"},
    {"--numa-binding", "workers inherit the launcher's CPU affinity; bind with numactl or taskset around it"},
    {"--signals-to-handle", "SIGINT, SIGTERM and SIGHUP are passed to the workers, SIGQUIT too"},
    {"--shutdown-timeout", "a stop gives the workers --grace-period seconds"},
    {"--virtual-local-rank", "each worker's LOCAL_RANK is its own"},
    {"--print-completion", "no shell completion is generated"},
};

// "--nproc-per-node" -> "PET_NPROC_PER_NODE".
std::string torchrunVariable(const std::string& flag) {
  std::string name = "PET_" + flag.substr(2);
  for (char& c : name) c = c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return name;
}

// torchrun's environment fallbacks: each of kTorchrunFlags not on the command line (nor made moot
// by a flag there) takes its PET_ variable's value, through the flag's own parsing.
void applyTorchrunVariables(LaunchApp& cli, const LaunchOptions& o, const comm::EnvLookup& env) {
  auto moot = [&](const std::string& flag) {
    for (const auto& [a, b] : kConflicts) {
      if ((flag == a && cli.given(b)) || (flag == b && cli.given(a))) return true;
    }
    const bool master = flag == "--master-addr" || flag == "--master-port";
    return cli.given(flag) || (o.standalone && (master || flag == "--rdzv-endpoint")) ||
           (master && cli.from_env.count("--rdzv-endpoint") > 0);
  };
  for (const std::string flag : kTorchrunFlags) {
    const std::string var = torchrunVariable(flag);
    std::optional<std::string> value = env(var.c_str());
    CLI::Option* opt = cli.app.get_option(flag);
    const bool is_switch = opt->get_expected_max() == 0;
    if (!value || (value->empty() && !is_switch) || moot(flag)) continue;
    std::string v = *value;
    // A flag wins over a variable: with --rdzv-timeout given, PET_RDZV_CONF's join_timeout (the same
    // setting) is set aside, and its other keys still apply.
    if (flag == std::string("--rdzv-conf") && cli.given("--rdzv-timeout")) {
      std::string kept;
      for (size_t pos = 0; pos <= v.size();) {
        const size_t comma = std::min(v.find(',', pos), v.size());
        const std::string item = v.substr(pos, comma - pos);
        if (item.rfind("join_timeout=", 0) == 0)
          cli.env_join_timeout_dropped = item;
        else if (!item.empty())
          kept += (kept.empty() ? "" : ",") + item;
        pos = comma + 1;
      }
      if (kept.empty()) continue;
      v = kept;
    }
    if (is_switch) {  // torchrun's bool(int(value)); "" is Kubeflow's way of saying on
      char* end = nullptr;
      const long on = v.empty() ? 1 : std::strtol(v.c_str(), &end, 10);
      LOCKSTEP_ENFORCE(v.empty() || (*end == '\0' && end != v.c_str()), ValueError, "environment variable ",
                       var, "='", v, "' (the default of ", flag, ") expects 0 or 1");
      if (on == 0) continue;
      v = "true";
    }
    try {
      opt->add_result(v);
      opt->run_callback();
    } catch (const ValueError& e) {
      throw ValueError(
          ::lockstep::detail::concat("environment variable ", var, "='", *value, "': ", e.what()));
    }
    cli.from_env.insert(flag);
  }
}

// The `--flag=value` forms that CLI11 reads otherwise than torchrun: `--flag=` (an empty value, as
// `--log-dir=$UNSET` gives) would take the next argument as the value, so it becomes `--flag ""`
// and the flag's own check names it; `--switch=value` would be read as true or false, and is an
// error. Only the launcher's flags are looked at: the walk stops at `--` or PROGRAM.
std::vector<std::string> splitEqualsForms(const CLI::App& app, const std::vector<std::string>& args) {
  std::vector<std::string> out;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--" || a.size() < 2 || a[0] != '-') break;
    const auto eq = a.find('=');
    const CLI::Option* opt = app.get_option_no_throw(a.substr(0, eq));
    if (opt == nullptr) {  // unknown: CLI11 collects it and parseLaunchArgs names it
      out.push_back(a);
      continue;
    }
    const bool takes_value = opt->get_expected_max() != 0;
    LOCKSTEP_ENFORCE(takes_value || eq == std::string::npos, ValueError, "option ", opt->get_name(),
                     " takes no value");
    if (takes_value && eq == a.size() - 1) {
      out.insert(out.end(), {a.substr(0, eq), ""});
      continue;
    }
    out.push_back(a);
    if (takes_value && eq == std::string::npos && i + 1 < args.size()) out.push_back(args[++i]);
  }
  out.insert(out.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  return out;
}

// CLI11's one parse error that the flags can cause, "--nnodes: 1 required N missing" (a flag
// with a value came last), as the other flag errors say it.
[[noreturn]] void throwParseError(const CLI::App& app, const CLI::ParseError& e) {
  const std::string what = e.what();
  if (auto colon = what.find(": "); colon != std::string::npos) {
    if (const CLI::Option* opt = app.get_option_no_throw(what.substr(0, colon)))
      throw ValueError(::lockstep::detail::concat("option ", opt->get_name(), " needs a value (",
                                                  opt->get_type_name(), ")"));
  }
  throw ValueError(what);
}

void validate(const LaunchOptions& o, const LaunchApp& cli) {
  for (const auto& [a, b] : kConflicts) {
    LOCKSTEP_ENFORCE(!(cli.given(a) && cli.given(b)), ValueError, "options ", a, " and ", b,
                     " conflict; give only one");
  }
  LOCKSTEP_ENFORCE(!(o.standalone && o.nnodes > 1), ValueError,
                   "option --standalone runs a single node but --nnodes is ", o.nnodes,
                   "; drop --standalone and give --rdzv-endpoint or --master-addr");
  LOCKSTEP_ENFORCE(!(o.elastic() && cli.given("--node-rank")), ValueError,
                   "option --node-rank=", o.node_rank.value_or(0), " and an elastic --nnodes=", o.min_nodes,
                   ":", o.nnodes,
                   " conflict: an elastic job numbers its nodes anew each time it forms; drop --node-rank");
  LOCKSTEP_ENFORCE(!o.node_rank || o.elastic() || *o.node_rank < o.nnodes, ValueError,
                   "option --node-rank is ", o.node_rank.value_or(0), " but --nnodes is ", o.nnodes,
                   "; node ranks are 0..", o.nnodes - 1);
  LOCKSTEP_ENFORCE(!(o.module && o.no_python), ValueError,
                   "options --module and --no-python conflict: a module runs through the Python "
                   "interpreter; give only one");
  LOCKSTEP_ENFORCE(o.help || !o.program.empty(), ValueError,
                   "missing PROGRAM: give the program to run after the launcher options");
}

}  // namespace

std::vector<std::string> workerCommand(const LaunchOptions& o) {
  const bool script = o.program.size() > 3 && o.program.compare(o.program.size() - 3, 3, ".py") == 0;
  std::vector<std::string> cmd;
  if (o.module || (script && !o.no_python)) {
    const char* python = std::getenv("LOCKSTEP_PYTHON");
    cmd = {python && *python ? python : "python3", "-u"};
    if (o.module) cmd.push_back("-m");
  }
  cmd.push_back(o.program);
  cmd.insert(cmd.end(), o.program_args.begin(), o.program_args.end());
  return cmd;
}

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

std::string formatStreamSelection(const StreamSelection& s) {
  if (s.by_local_rank.empty()) return std::to_string(s.all);
  std::string out;
  for (const auto& [rank, mask] : s.by_local_rank)
    out += (out.empty() ? "" : ",") + std::to_string(rank) + ":" + std::to_string(mask);
  return out;
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
      LOCKSTEP_ENFORCE(!port.empty(), ValueError, "option ", flag, "=", value,
                       ": the port after ':' is empty; give [ADDR]:PORT or [ADDR]");
    }
  } else {
    // An IPv6 address has several colons: it must be bracketed to tell it from its port (torchrun
    // would split "::1" into host ':' and port 1).
    LOCKSTEP_ENFORCE(std::count(value.begin(), value.end(), ':') <= 1, ValueError, "option ", flag, "=",
                     value, ": an IPv6 address goes in brackets, [ADDR]:PORT (e.g. [::1]:29400)");
    auto colon = value.rfind(':');
    host = value.substr(0, colon);
    if (colon != std::string::npos) {
      port = value.substr(colon + 1);
      LOCKSTEP_ENFORCE(!port.empty(), ValueError, "option ", flag, "=", value,
                       ": the port after ':' is empty; give HOST:PORT or HOST");
    }
  }
  LOCKSTEP_ENFORCE(!host.empty(), ValueError, "option ", flag, "=", value, ": expected HOST:PORT");
  // No port: torchrun's c10d rendezvous default, 29400 (--master-port's is 29500).
  return {host, port.empty() ? 29400 : parseInt(flag, port, 1, 65535)};
}

LaunchOptions parseLaunchArgs(const std::vector<std::string>& args, int cores, const comm::EnvLookup& env) {
  LaunchOptions o;
  LaunchApp cli(o, cores);
  std::vector<std::string> reversed = splitEqualsForms(cli.app, args);
  std::reverse(reversed.begin(), reversed.end());  // CLI11 takes them last first
  try {
    cli.app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    throwParseError(cli.app, e);
  }
  // What CLI11 did not recognise before PROGRAM; a `--` that ended the flags is no error. torchrun's
  // flags that have no counterpart here say so and what to do.
  for (const auto& extra : cli.app.remaining()) {
    if (extra == "--") continue;
    std::string name = extra.substr(0, extra.find('='));
    std::replace(name.begin() + std::min<size_t>(2, name.size()), name.end(), '_', '-');
    for (const auto& [flag, why] : kTorchrunOnlyFlags) {
      LOCKSTEP_ENFORCE(name != flag, ValueError, "option ", extra, ": torchrun's ", flag,
                       " has no counterpart in lockstep run (", why, "); drop it");
    }
    throw ValueError(::lockstep::detail::concat("unknown option '", extra, "'"));
  }
  applyTorchrunVariables(
      cli, o, env ? env : [](const char* name) { return lockstep::env::get(name); });
  if (!cli.env_join_timeout_dropped.empty())
    o.notes.push_back("PET_RDZV_CONF's " + cli.env_join_timeout_dropped +
                      " is not used: --rdzv-timeout on the command line sets the same timeout");
  if (!cli.given("--rdzv-endpoint") && !cli.given("--master-port") && o.standalone) o.master_port = 0;
  if (o.standalone && !cli.given("--rdzv-id")) o.run_id = "";  // the agent makes a random one
  validate(o, cli);
  if (o.elastic() && o.node_rank) {  // from PET_NODE_RANK: torchrun's c10d rendezvous ignores it too
    o.notes.push_back("PET_NODE_RANK=" + std::to_string(*o.node_rank) +
                      " is not used: an elastic job (--nnodes " + std::to_string(o.min_nodes) + ":" +
                      std::to_string(o.nnodes) + ") numbers its nodes anew each time it forms");
    o.node_rank.reset();
  }
  return o;
}

std::string launchUsage() {
  LaunchOptions unused;
  return LaunchApp(unused, 1).app.help();
}

}  // namespace lockstep::launch
