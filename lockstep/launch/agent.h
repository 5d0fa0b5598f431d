#pragma once
// The agent behind `lockstep run`: one per node. It rendezvouses with the other nodes' agents,
// starts this node's workers, watches them, and on the first failure anywhere stops every
// worker of the job, reports the root cause and restarts the whole group while restarts remain.
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/comm/op_watch.h"
#include "lockstep/launch/launch_options.h"

namespace lockstep {
class Error;
}

namespace lockstep::launch {

class Console;
struct JobEnd;
class ProgressChannel;
class Rendezvous;
struct RendezvousResult;
class SignalWatcher;
class WorkerGroup;
class Watchdog;
struct WatchdogOptions;
struct WorkerSpec;

/// Exit codes of run(), for a cluster's restart policy (Kubeflow's `restartPolicy: ExitCode`
/// retries a pod that exits 128 or more and fails the job on any other code; docs/deploy.md):
///  - the root cause's own: a worker's exit code (2 for a bad config: permanent), or 128 + N when
///    signal N killed it (retried);
///  - kJobTimedOut when a rank or node stopped answering (stopped or stuck past the timeout, a
///    silent node, the master's store lost) or a node never arrived: what a retry elsewhere may cure;
///  - 128 + N when signal N stopped this agent, or another node's agent (the job was stopped);
///  - kJobFailed for a failure whose code is not known.
constexpr int kJobSucceeded = 0;
constexpr int kJobFailed = 1;
constexpr int kJobTimedOut = 128 + 15;  // SIGTERM's code: as if the job had been stopped from outside

class Agent {
 public:
  /// The program is resolved on PATH here (ValueError when it cannot be found).
  explicit Agent(const LaunchOptions& options);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  /// Runs the job to its end and returns the process exit code. Blocks; installs handlers for
  /// SIGCHLD/SIGINT/SIGTERM/SIGHUP for its duration. No worker or descendant of one is left
  /// running when it returns.
  int run();

 private:
  // kReform: an elastic job ends the round to admit a waiting node (no failure, no restart counted).
  enum class Outcome { kSucceeded, kFailed, kInterrupted, kStopped, kReform };
  struct Attempt;
  // One attempt: start this node's workers, then supervise them until the attempt ends.
  Outcome runAttempt(int attempt, Rendezvous& rdzv, const RendezvousResult& r, SignalWatcher& signals);

  // Starting: the attempt's worker specs (worker_specs.h) and the watchdog's options.
  std::vector<WorkerSpec> workerSpecs(int attempt, const RendezvousResult& r) const;
  WatchdogOptions watchdogOptions(int attempt, const RendezvousResult& r);
  std::chrono::milliseconds watchdogInterval() const;

  // Supervising: the loop waits for worker output, exits and signals and hands each event to the
  // step that ends the attempt with its outcome.
  Outcome monitor(Attempt& a);
  Outcome stopForSignal(Attempt& a, int sig);
  Outcome onWorkersFailed(Attempt& a, const std::vector<size_t>& failed);
  Outcome onWatchdog(Attempt& a, const std::string& watched);
  Outcome onStoreLost(Attempt& a, const Error& e);
  /// Before this node stops its workers to end the round (a failure, a stop, a re-formation): a
  /// last heartbeat (Watchdog::kLeftRound) so the other agents do not take the silence that
  /// follows for a lost node. Best effort.
  void leaveRound(Attempt& a);
  /// "lost contact with the rendezvous store of the master node (...) at ADDR:PORT: e" and a newline.
  std::string lostStoreReport(const Attempt& a, const Error& e) const;
  // Another node failed or the job was stopped: the outcome, or none to keep going.
  std::optional<Outcome> checkOtherNodes(Attempt& a);
  // This node's workers all succeeded: wait for the other nodes' (or a failure among them).
  Outcome awaitOtherNodes(Attempt& a);
  Outcome stopForRemote(Attempt& a, Outcome outcome);
  // Publishes what this node's watchdog suspects (a stopped worker, a silent node) as the primary
  // cause of a failure found elsewhere.
  void publishSuspects(Attempt& a);
  void settleReport(int attempt, Rendezvous& rdzv, bool have_primary);
  // The job's end as the agents agreed on it (a failure or a shutdown published in the store).
  void adopt(const JobEnd& end);
  void writeReport(const std::string& headline, const std::string& body);
  // Elastic: the round's nodes, and which came and went since this node's previous round.
  void logMembership(const RendezvousResult& r, const std::vector<std::string>& before,
                     const std::vector<std::string>& before_hosts) const;
  // Elastic: the round ends to re-form (another node asked, or one waits and there is room).
  // may_request: ask for it when a node waits and there is room (else only follow another's word).
  std::optional<Outcome> checkReform(Attempt& a, bool may_request);
  void log(const std::string& line) const;

  LaunchOptions options_;
  std::vector<std::string> command_;  // what each worker runs (workerCommand), argv[0] first
  std::string program_path_;
  std::string host_;
  std::string run_dir_;  // error files (and logs with --log-dir) live under it
  bool remove_run_dir_ = false;
  int interrupt_signal_ = 0;
  bool store_lost_ = false;               // the master's store is gone: no more store calls
  std::string report_;                    // the root cause of the last failed attempt
  int exit_code_ = kJobFailed;            // and the code the agent exits with for it
  int restarts_ = 0;                      // restarts after failures so far (of --max-restarts)
  std::chrono::milliseconds timeout_{0};  // --timeout / LOCKSTEP_TIMEOUT / default (the watchdog's)
  // --heartbeat-timeout / LOCKSTEP_HEARTBEAT_TIMEOUT / 30 s, at most timeout_: a silent node's limit
  std::chrono::milliseconds node_timeout_{0};
  std::string join_token_;  // the store's secret; empty: an unauthenticated store
  bool node_lost_ = false;  // the watchdog found a silent node: do not wait for it
  // On a terminal: the one progress line rank 0 reports through the side channel (console.h).
  std::unique_ptr<Console> console_;
  std::unique_ptr<ProgressChannel> progress_;
  // Which collective each worker of the attempt is inside (comm/op_watch.h), for the watchdog.
  std::unique_ptr<comm::OpWatchTable> ops_;
};

}  // namespace lockstep::launch
