#pragma once
// The options of `lockstep run`, parsed from torchrun-compatible flags (by CLI11, as the other
// commands). Parsing and validation are pure (no processes, no sockets) so every flag combination
// is unit-tested.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/comm/worker_environment.h"

namespace lockstep::launch {

/// Which standard streams of a worker go to files: a bit mask per local rank, torchrun's
/// `--redirects`/`--tee` values: 0 none, 1 stdout, 2 stderr, 3 both; "3" or "0:1,1:2".
struct StreamSelection {
  int all = 0;                       ///< Mask for local ranks not named in by_local_rank.
  std::map<int, int> by_local_rank;  ///< Per-local-rank masks ("0:1,1:2").
  /// The mask that applies to a local rank.
  int forLocalRank(int local_rank) const;
  bool any() const { return all != 0 || !by_local_rank.empty(); }
};
constexpr int kStdout = 1;
constexpr int kStderr = 2;

/// Everything `lockstep run` was asked to do. Defaults are torchrun's.
struct LaunchOptions {
  int nproc_per_node = 1;
  bool oversubscribe = false;  ///< Start --nproc-per-node ranks even past the machine (rank_capacity.h).
  int nnodes = 1;              ///< Nodes in the job; elastic (--nnodes MIN:MAX): at most this many.
  int min_nodes = 1;  ///< Elastic: the job starts (and re-forms) once this many are there; else nnodes.
  std::optional<int> node_rank;           ///< Unset: assigned by arrival order at rendezvous.
  std::string master_addr = "127.0.0.1";  ///< Host of the rendezvous store (the master agent).
  int master_port = 29500;                ///< Its port; 0 means "pick a free one" (--standalone).
  bool standalone = false;
  std::string run_id = "none";  ///< --rdzv-id / --run-id: names the job in the store.
  double rdzv_timeout_s = 900;  ///< How long to wait for all (elastic: MIN) nodes to arrive.
  /// What set rdzv_timeout_s ("--rdzv-timeout" or "--rdzv-conf join_timeout"; empty: the default):
  /// the two are one setting, so giving both is a conflict.
  std::string rdzv_timeout_source{};
  /// Elastic: once MIN nodes are there, how long a round still waits for more (up to MAX) before it
  /// closes (torchrun's --rdzv-conf last_call_timeout, default 30 s).
  double last_call_timeout_s = 30;
  int max_restarts = 0;
  double monitor_interval_s = 0.1;  ///< How often remote failures are polled for.
  double grace_period_s = 5;        ///< SIGTERM -> SIGKILL delay when stopping workers.
  /// --timeout: the collective timeout given to the workers (LOCKSTEP_TIMEOUT) and the watchdog's
  /// limit for a stopped worker. Unset: LOCKSTEP_TIMEOUT, else 300 s.
  std::optional<double> timeout_s;
  /// --heartbeat-timeout: how long another node may send no heartbeat (and the master's store may
  /// leave a call unanswered, for half of it) before the job is ended naming it; at most --timeout.
  /// Short by default, as a collective's timeout need not be: a cut-off node ends the job within a
  /// minute whatever the collectives may wait. Unset: LOCKSTEP_HEARTBEAT_TIMEOUT, else 30 s.
  std::optional<double> heartbeat_timeout_s;
  /// --join-token: the secret of the rendezvous store (docs/security.md). Empty: LOCKSTEP_JOIN_TOKEN;
  /// else a random one when the job has one node, none (with a warning) across nodes.
  std::string join_token{};
  std::string log_dir;        ///< Per-rank stdout/stderr files; empty: none.
  StreamSelection redirects;  ///< Streams written to files only.
  StreamSelection tee;        ///< Streams written to files and the console.
  std::string hostfile;       ///< Non-empty: print per-host command lines only.
  std::string program;
  std::vector<std::string> program_args;
  bool module = false;     ///< -m/--module: PROGRAM names a Python module (`python3 -u -m PROGRAM`).
  bool no_python = false;  ///< --no-python: run PROGRAM directly, also a .py script.
  bool help = false;
  /// What parsing set aside, for the caller to print as warnings (PET_NODE_RANK in an elastic job).
  std::vector<std::string> notes{};

  /// --nnodes MIN:MAX with MIN < MAX: nodes may join and leave, each change re-forms the job.
  bool elastic() const { return min_nodes < nnodes; }
};

/// Parses `lockstep run` arguments (without the program name). `cores` resolves
/// `--nproc-per-node auto`. Both `--dash-names` and torchrun's `--underscore_names` are accepted,
/// as `--flag value` or `--flag=value`; `--` or the first non-option ends launcher options and
/// everything after PROGRAM is passed to it untouched. Throws ValueError naming the flag on
/// unknown, malformed or conflicting flags.
///
/// As torchrun, every flag torchrun has takes its default from PET_<FLAG> (PET_NPROC_PER_NODE,
/// PET_NNODES, PET_MASTER_ADDR, PET_STANDALONE=1, ...), looked up in `env` (the process's own
/// environment by default): what Kubeflow's PyTorchJob sets. A flag on the command line wins over
/// its variable and over the variables of the flags it conflicts with; PET_RDZV_ENDPOINT wins over
/// PET_MASTER_ADDR/PET_MASTER_PORT, and standalone over all three. An empty variable counts as
/// unset, except PET_STANDALONE, PET_MODULE and PET_NO_PYTHON, which are on when set to "" (as
/// Kubeflow sets PET_STANDALONE) or to a non-zero integer. A bad value is a ValueError naming the
/// variable. See docs/deploy.md.
LaunchOptions parseLaunchArgs(const std::vector<std::string>& args, int cores,
                              const comm::EnvLookup& env = {});

/// What each worker executes, argv[0] first: torchrun's `python3 -u PROGRAM ARGS...` for a Python
/// script (PROGRAM ending in .py) and `python3 -u -m PROGRAM ARGS...` with --module; PROGRAM ARGS...
/// itself with --no-python and for every other program (torchrun would hand a binary to Python; here
/// an executable runs as itself). The interpreter is $LOCKSTEP_PYTHON, else python3 from PATH.
std::vector<std::string> workerCommand(const LaunchOptions& o);

/// The cores this process may run on (its CPU affinity): what `--nproc-per-node cpu` means (and
/// auto without a GPU).
int availableCores();
/// The CUDA devices this process sees (0 in a build without CUDA, or without a GPU or driver).
int visibleGpus();
/// A `--nproc-per-node` value, as torchrun reads it: a count in [1, 65536]; cpu: one worker per
/// core of `cores`; gpu: one per visible GPU of `gpus` (an error naming the flag when there is
/// none); auto: one per GPU when there are any, else one per core. ValueError naming `flag` and the
/// value otherwise.
int parseNprocPerNode(const std::string& flag, const std::string& value, int cores, int gpus);

/// The usage text of `lockstep run`.
std::string launchUsage();

/// Parses a `--redirects`/`--tee` value ("3", "0:1,1:2"); ValueError naming flag when malformed.
StreamSelection parseStreamSelection(const std::string& flag, const std::string& value);
/// The value parseStreamSelection reads back as s ("3", "0:1,1:2").
std::string formatStreamSelection(const StreamSelection& s);

/// Splits "host:port" (also "[v6addr]:port"); ValueError naming flag when malformed.
std::pair<std::string, int> parseEndpoint(const std::string& flag, const std::string& value);

}  // namespace lockstep::launch
