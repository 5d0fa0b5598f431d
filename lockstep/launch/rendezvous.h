#pragma once
// How the agents of one job (one per node) find each other and stay in step, through a TCPStore
// hosted by the master agent: per attempt ("round") they agree on node ranks and worker counts,
// publish the first failure so every node stops and restarts together, and wait for each
// other before the host takes the store down. Keys live under "lockstep/run/RUN_ID/".
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/comm/store/store.h"
#include "lockstep/launch/worker_env.h"

namespace lockstep::launch {

struct RendezvousOptions {
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;  ///< 0: the host picks a free port (--standalone).
  int nnodes = 1;           ///< Nodes in the job; elastic: at most this many.
  /// Elastic when below nnodes (--nnodes MIN:MAX): a round closes once min_nodes are there and
  /// last_call has passed, or nnodes are there; node ranks are assigned anew each round.
  int min_nodes = 0;
  std::chrono::milliseconds last_call{std::chrono::seconds(30)};
  std::optional<int> node_rank;  ///< Unset: assigned by arrival order in the first round.
  std::string run_id = "none";
  std::chrono::milliseconds timeout{std::chrono::seconds(900)};  ///< For all (elastic: MIN) nodes to arrive.
  std::string hostname;                                          ///< This node's name, shown in reports.
  /// Limit of each store call after connecting: a master that does not answer within it (plus the
  /// store's slack) counts as lost.
  std::chrono::milliseconds op_timeout{std::chrono::seconds(30)};
  /// The join token the store demands of every client (comm::TCPStoreOptions::join_token).
  std::string join_token{};
};

/// The agreement reached by one round.
struct RendezvousResult {
  int round = 0;  ///< The round joined: the one asked for, or (elastic, a newcomer) a later one.
  RankLayout layout;
  std::vector<std::string> hosts;  ///< Index: node rank.
  std::vector<std::string>
      members;              ///< Each node's agent's own id (index: node rank), to tell who came and went.
  std::vector<int> nprocs;  ///< Workers per node; index: node rank.
  /// MASTER_ADDR/MASTER_PORT for the workers: an address of node 0 as the other nodes reach it
  /// and a port that was free there, for global rank 0 to host the workers' own store (PyTorch's
  /// env:// TCPStore), fresh each round as torchrun's c10d rendezvous does.
  std::string worker_master_addr;
  int worker_master_port = 0;
};

/// How a round or the job ended, as the agents share it: what every agent prints, and the exit code
/// every agent then exits with (agent.h), so that all nodes of a job tell the cluster the same.
struct JobEnd {
  std::string report;
  int exit_code = 1;
  bool operator==(const JobEnd&) const = default;
};

/// Not thread-safe: one agent thread drives it. join() is collective over the nodes.
class Rendezvous {
 public:
  /// Hosts the store when this node is the master (node rank 0; in arrival mode, when
  /// master_addr is an address of this machine and the port is free), else connects to it,
  /// retrying until options.timeout. ValueError when the master port is already in use.
  explicit Rendezvous(const RendezvousOptions& options);
  /// Over an existing store (tests, with a HashStore shared by threads).
  Rendezvous(const RendezvousOptions& options, std::shared_ptr<comm::Store> store);

  /// The port of the store (the chosen one with --standalone).
  int port() const { return port_; }
  bool hostsStore() const { return tcp_ != nullptr && hosts_; }
  /// The store itself (un-prefixed), for the host to keep alive.
  const std::shared_ptr<comm::Store>& store() const { return base_; }

  /// Collective: announces this node's worker count for `round` and waits for every node.
  /// `interrupted` is polled while waiting; nullopt when it returned true. TimeoutError naming
  /// the missing node ranks after options.timeout; ValueError when two nodes claim the same node
  /// rank or more than nnodes join.
  ///
  /// Elastic: joins `round`, or the first round not yet closed when that is later (a newcomer).
  /// Round k > 0 opens once round k - 1 ended (a failure or a re-formation published); it closes
  /// when MAX nodes are in, or MIN are and last_call has passed since. A node that comes after the
  /// close waits for the next round (waiting() counts it). Node ranks: the nodes of the previous
  /// round first, in their old order, then the newcomers in arrival order. Nullopt also when the
  /// job ended (ended()) while this node waited. TimeoutError when fewer than MIN came within
  /// options.timeout.
  std::optional<RendezvousResult> join(int round, int nproc, const std::function<bool()>& interrupted);
  bool elastic() const { return options_.min_nodes > 0 && options_.min_nodes < options_.nnodes; }
  /// Elastic: nodes waiting to join the round after `round` (newcomers that came after it closed).
  int waiting(int round);
  /// Elastic: asks every node to end `round` and re-form (a node is waiting and there is room for
  /// it); `why` is what the agents log. reformRequested() is that word, if any.
  void requestReform(int round, const std::string& why);
  std::optional<std::string> reformRequested(int round);
  /// The job succeeded: a node still waiting to join has nothing left to join.
  void publishComplete();
  /// How the job ended for good, if it did: a shutdown (publishShutdown) or its success.
  std::optional<JobEnd> ended();

  /// Records the root cause of round's failure; only the first report is kept. True when this
  /// call's report was the first. `primary`: the report names a rank that died by a signal, was
  /// stopped, or a node that went silent (what the agents saw themselves), not a rank that only
  /// failed because a peer did; the first primary report is kept besides and wins in failure().
  bool publishFailure(int round, const JobEnd& failure, bool primary = false);
  /// The first primary failure report of round if any, else the first report, if any node
  /// published one.
  std::optional<JobEnd> failure(int round);
  /// The first primary failure report of round, if any.
  std::optional<JobEnd> primaryFailure(int round);
  /// Publishes this node's heartbeat (a counter) for round; heartbeats() reads every node's (index:
  /// node rank; empty string: none yet). The watchdog's view of the other agents.
  void beat(int round, int64_t counter);
  std::vector<std::string> heartbeats(int round);
  /// Node 0's word on round's workers' store (the one global rank 0 hosts on the workers'
  /// MASTER_PORT, PyTorch's env://): "open" once rank 0 listens there, "closed" once it stopped.
  /// The last word wins; workerStore() is nullopt before any.
  void publishWorkerStore(int round, const std::string& state);
  std::optional<std::string> workerStore(int round);
  /// Tells every node to stop for good (no restart): an agent was interrupted.
  void publishShutdown(const JobEnd& why);
  std::optional<JobEnd> shutdown();
  /// Counts this node as done with round; allSucceeded says when every node is.
  void markSucceeded(int round);
  bool allSucceeded(int round);
  /// Counts this node out. The host then waits (up to `linger`) for the others, so that they can
  /// still read the final keys before its store goes away.
  void leave(int round, std::chrono::milliseconds linger);

 private:
  std::string key(int round, const std::string& name) const;
  /// ValueError (and word for the agents waiting in this round of a fixed-size job, which
  /// throwIfRefused turns into the same error) when this agent's --nnodes differs from the first
  /// agent's.
  void checkSameNodeCount(int round);
  void throwIfRefused(int round);
  std::optional<RendezvousResult> joinFixed(int round, int nproc, const std::function<bool()>& interrupted);
  std::optional<RendezvousResult> joinElastic(int round, int nproc, const std::function<bool()>& interrupted);
  // This node's record for a round: "NPROC\nHOST\nTOKEN\nADDR\nPORT\nPREVIOUS_NODE_RANK".
  std::string record(int nproc) const;
  // The agreement from every node's record (index: slot) and the order of the slots by node rank.
  RendezvousResult agree(int round, const std::vector<std::string>& records, const std::vector<int>& order,
                         int my_slot) const;

  RendezvousOptions options_;
  std::shared_ptr<comm::Store> base_;   // the TCPStore (or a test's store)
  std::shared_ptr<comm::Store> store_;  // base_ under the run's prefix
  comm::Store* tcp_ = nullptr;
  bool hosts_ = false;
  int port_ = 0;
  std::optional<int> group_rank_;
  int round_nodes_;  // nodes in the round joined last (before any: nnodes)
  std::string token_;
};

/// True when addr resolves to an address of this machine (it can be bound).
bool isLocalAddress(const std::string& addr);

/// The address of this machine that packets to addr:port leave from (the route's source), as
/// text; addr itself when there is no route. How other nodes reach this one.
std::string localAddressToward(const std::string& addr, int port);

/// A TCP port that is free on this machine now (the kernel's pick); IoError when none can be had.
int freeTcpPort();

}  // namespace lockstep::launch
