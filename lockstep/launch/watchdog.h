#pragma once
// The agent's watchdog over one attempt: it publishes this node's heartbeat through the
// rendezvous store, watches the other nodes' heartbeats, this node's workers' process states and
// the collective each of them is inside (comm/op_watch.h), so that a stopped rank, a rank stuck in a
// backend past its op's timeout, a dead or cut-off node is named and the whole job ends within the
// timeout (plus op_grace for a stuck op; node_timeout for a silent node) instead of waiting on a
// collective that can never finish (docs/launch.md).
//
// What each agent sees itself (a worker killed by a signal, a stopped worker, a silent node) is a
// *primary* cause; a worker that exited with an error because a peer vanished is *secondary*.
// The agents publish both kinds and report the first primary one, so a kill during a gloo data
// exchange is reported as the killed rank, not as the peer whose connection broke.
// Not thread-safe: the agent's loop drives it.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lockstep::comm {
class OpWatchTable;
}

namespace lockstep::launch {

class Rendezvous;
class WorkerGroup;

/// How long another node may send no heartbeat, by default (--heartbeat-timeout): long enough for a
/// busy host's agent to beat (it beats every second), short enough that a cut-off node ends the job
/// within a minute, as a cluster expects.
inline constexpr std::chrono::milliseconds kDefaultHeartbeatTimeout{std::chrono::seconds(30)};

struct WatchdogOptions {
  /// How long a worker may stay stopped before the job is failed.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  /// How long another node may stay silent (no heartbeat) before the job is failed.
  std::chrono::milliseconds node_timeout = kDefaultHeartbeatTimeout;
  /// How often this node beats and looks at the others and at its workers.
  std::chrono::milliseconds interval{std::chrono::seconds(1)};
  int round = 0;                   ///< The attempt.
  int node_rank = 0;               ///< This node.
  int nnodes = 1;                  ///< Nodes in the job.
  std::string host;                ///< This node's name, for reports.
  std::vector<std::string> hosts;  ///< Every node's name (index: node rank), for reports.
  std::vector<int> first_ranks;    ///< Every node's first global rank, plus the world size at the end.
  /// The workers' op table (slot: local rank); null: ops are not watched.
  const comm::OpWatchTable* ops = nullptr;
  /// How long past its own timeout an op may run before its rank counts as stuck in the backend
  /// (a backend that honours the deadline has failed the op and ended the rank by then).
  std::chrono::milliseconds op_grace{std::chrono::seconds(5)};
  /// The workers' MASTER_ADDR/MASTER_PORT, where global rank 0 hosts their own store (PyTorch's
  /// env://); port 0: not watched. Once rank 0 listens there, every rank must connect to it within
  /// join_timeout (--rdzv-timeout), or it is named instead of retrying for PyTorch's 30 minutes.
  std::string worker_store_addr;
  int worker_store_port = 0;
  std::chrono::milliseconds join_timeout{std::chrono::seconds(900)};
};

class Watchdog {
 public:
  /// rdzv may be null (a single node without heartbeats, or a test of the local checks).
  Watchdog(const WatchdogOptions& options, Rendezvous* rdzv);

  /// At most once per interval: beats, reads the other nodes' heartbeats and this node's workers'
  /// states. Returns a primary failure report when a worker has been stopped for longer than the
  /// timeout, has been inside one op for longer than that op's timeout plus op_grace, has not
  /// joined the workers' store join_timeout after it opened, or another node has been silent for
  /// longer than node_timeout. Store errors propagate (the caller treats the master's store as lost).
  std::optional<std::string> check(const WorkerGroup& group);

  /// What the watchdog suspects right now, for a failure found elsewhere: workers of this node
  /// that are stopped or inside an op past its timeout, and nodes silent for longer than three
  /// intervals. Empty when nothing.
  std::string suspects(const WorkerGroup& group);
  /// True when the last report or suspects() named a silent node (the agent then does not wait
  /// for it to leave).
  bool nodeLost() const { return node_lost_; }
  /// The heartbeat an agent publishes when it leaves a round on purpose, having published its
  /// failure (its workers failed): no beat follows, and the other agents must not take that silence
  /// for a lost node (they may look seconds later, every --monitor-interval).
  static constexpr int64_t kLeftRound = -1;

 private:
  using Clock = std::chrono::steady_clock;
  void observeWorkers(const WorkerGroup& group, Clock::time_point now);
  void observeNodes(Clock::time_point now);
  std::string stoppedReport(const WorkerGroup& group, Clock::time_point now,
                            std::chrono::milliseconds at_least) const;
  std::string silentReport(Clock::time_point now, std::chrono::milliseconds at_least);
  std::string stuckReport(const WorkerGroup& group, std::chrono::milliseconds grace) const;
  std::string where(const WorkerGroup& group, size_t i) const;  // "rank 1 (local rank 1 on host ...)"
  // The workers' store: whether rank 0 listens on its port, which workers have connected to it.
  void observeWorkerStore(const WorkerGroup& group, Clock::time_point now);
  std::string unjoinedReport(const WorkerGroup& group, Clock::time_point now) const;

  WatchdogOptions options_;
  Rendezvous* rdzv_;
  Clock::time_point next_check_;
  int64_t beats_ = 0;
  std::vector<std::optional<Clock::time_point>> stopped_since_;  // index: worker in the group
  std::vector<std::string> last_beat_;                           // index: node rank
  std::vector<Clock::time_point> last_change_;                   // when last_beat_ last changed
  bool node_lost_ = false;
  std::vector<bool> joined_;                            // index: worker; seen connected to the workers' store
  std::optional<Clock::time_point> worker_store_open_;  // when this agent learnt that rank 0 listens
  bool joins_over_ = false;  // every worker here joined, or rank 0 stopped listening: nothing to watch
};

/// The state letter of /proc/PID/stat ('R', 'S', 'T' stopped, 't' traced, 'Z'...); '?' when the
/// process is gone or the file cannot be read.
char processState(int pid);

}  // namespace lockstep::launch
