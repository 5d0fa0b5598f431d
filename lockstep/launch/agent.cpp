#include "lockstep/launch/agent.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <thread>

#include "lockstep/comm/process_group.h"
#include "lockstep/comm/store/tcp_store_auth.h"
#include "lockstep/comm/worker_environment.h"
#include "lockstep/launch/console.h"
#include "lockstep/launch/failure_report.h"
#include "lockstep/launch/orphan_reaper.h"
#include "lockstep/launch/progress_channel.h"
#include "lockstep/launch/rendezvous.h"
#include "lockstep/launch/signal_watcher.h"
#include "lockstep/launch/watchdog.h"
#include "lockstep/launch/worker_env.h"
#include "lockstep/launch/worker_group.h"
#include "lockstep/launch/worker_specs.h"
#include "lockstep/util/error.h"

namespace lockstep::launch {

namespace {

using Ms = std::chrono::milliseconds;

Ms toMs(double seconds) { return Ms(static_cast<int64_t>(seconds * 1000.0)); }

std::string hostName() {
  if (const char* h = std::getenv("LOCKSTEP_HOSTNAME"); h != nullptr && *h != '\0') return h;
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

std::string randomRunId() {
  std::random_device rd;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%08x%08x", rd(), rd());
  return buf;
}

}  // namespace

Agent::Agent(const LaunchOptions& options) : options_(options), host_(hostName()) {
  if (options_.run_id.empty()) options_.run_id = randomRunId();
  if (options_.timeout_s) {
    timeout_ = toMs(*options_.timeout_s);
  } else if (const char* t = std::getenv("LOCKSTEP_TIMEOUT")) {
    timeout_ = comm::parseTimeoutSeconds("environment variable LOCKSTEP_TIMEOUT", t);
  } else {
    timeout_ = comm::kDefaultCollectiveTimeout;
  }
  if (options_.heartbeat_timeout_s) {
    node_timeout_ = toMs(*options_.heartbeat_timeout_s);
  } else if (const char* t = std::getenv("LOCKSTEP_HEARTBEAT_TIMEOUT")) {
    node_timeout_ = comm::parseTimeoutSeconds("environment variable LOCKSTEP_HEARTBEAT_TIMEOUT", t);
  } else {
    node_timeout_ = kDefaultHeartbeatTimeout;
  }
  node_timeout_ = std::min(node_timeout_, timeout_);
  join_token_ = options_.join_token;
  if (join_token_.empty()) {
    if (const char* t = std::getenv("LOCKSTEP_JOIN_TOKEN")) join_token_ = t;
  }
  // One node: every client is a worker this agent starts, so a fresh secret costs nothing.
  if (join_token_.empty() && options_.nnodes == 1) join_token_ = comm::randomJoinToken();
  LOCKSTEP_ENFORCE(
      join_token_.empty() || join_token_.size() >= 16, ValueError,
      "LOCKSTEP_JOIN_TOKEN needs a secret of at least 16 characters (e.g. `openssl rand -hex 32`)");
  command_ = workerCommand(options_);
  try {
    program_path_ = resolveProgram(command_[0], std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin");
  } catch (const ValueError& e) {
    // The interpreter of a .py or -m program: named by what chose it.
    const char* python = std::getenv("LOCKSTEP_PYTHON");
    if (command_[0] != options_.program && python && command_[0] == python)
      throw ValueError(std::string("LOCKSTEP_PYTHON (the interpreter for ") + options_.program +
                       "): " + e.what());
    throw;
  }
  if (!options_.log_dir.empty()) {
    run_dir_ = options_.log_dir + "/" + options_.run_id;
    try {
      makeDirs(run_dir_);
    } catch (const IoError& e) {
      throw ValueError(std::string("--log-dir ") + options_.log_dir + ": " + e.what());  // bad usage: exit 2
    }
  } else {
    std::string tmpl = (std::getenv("TMPDIR") ? std::string(std::getenv("TMPDIR")) : std::string("/tmp")) +
                       "/lockstep-run-XXXXXX";
    LOCKSTEP_ENFORCE(::mkdtemp(tmpl.data()) != nullptr, IoError, "cannot create a directory like ", tmpl,
                     " for the workers' error files; set TMPDIR to a writable directory");
    run_dir_ = tmpl;
    // --redirects/--tee without --log-dir keep their files there (torchrun does the same).
    remove_run_dir_ = !options_.redirects.any() && !options_.tee.any();
  }
}

Agent::~Agent() {
  progress_.reset();
  console_.reset();
  if (remove_run_dir_) {
    std::error_code ec;
    std::filesystem::remove_all(run_dir_, ec);
  }
}

void Agent::log(const std::string& line) const {
  writeConsole(STDERR_FILENO, "[lockstep run] " + line + "\n");
}

int Agent::run() {
  ::signal(SIGPIPE, SIG_IGN);  // a closed console must not kill the agent; workers get SIG_DFL back
  becomeSubreaper();
  RendezvousOptions ro;
  ro.master_addr = options_.master_addr;
  ro.master_port = options_.master_port;
  ro.nnodes = options_.nnodes;
  ro.min_nodes = options_.elastic() ? options_.min_nodes : 0;
  ro.last_call = toMs(options_.last_call_timeout_s);
  ro.node_rank = options_.nnodes == 1 ? std::optional<int>(0) : options_.node_rank;
  ro.run_id = options_.run_id;
  ro.timeout = toMs(options_.rdzv_timeout_s);
  ro.hostname = host_;
  // A master that does not answer a store call within half the heartbeat timeout is lost: the agent
  // then ends its workers within that timeout, as the master's agent does for a silent node.
  ro.op_timeout = std::clamp<Ms>(node_timeout_ / 2, Ms(1000), Ms(30000));
  ro.join_token = join_token_;
  if (join_token_.empty()) {
    log("warning: the rendezvous store at port " + std::to_string(options_.master_port) +
        " is not authenticated: anyone who reaches it can join the job or change its keys; give every "
        "node the same LOCKSTEP_JOIN_TOKEN (docs/security.md)");
  }
  if (options_.nproc_per_node > 1 && std::getenv("OMP_NUM_THREADS") == nullptr) {
    // torchrun's notice: workers sharing a host get one OpenMP thread each unless told otherwise.
    log("OMP_NUM_THREADS is set to 1 for each worker, so that the " +
        std::to_string(options_.nproc_per_node) +
        " workers of this host do not overload it (torchrun's default; `lockstep train` on a GPU takes its "
        "share "
        "of the cores instead); set OMP_NUM_THREADS to choose the threads per worker");
  }
  // The store comes first: a Ctrl-C while connecting simply ends the agent (no workers yet).
  std::unique_ptr<Rendezvous> joined;
  try {
    joined = std::make_unique<Rendezvous>(ro);
  } catch (const TimeoutError& e) {
    log(std::string("error: ") + e.what());
    return kJobTimedOut;  // the master's pod may not be up yet: a retry may find it
  } catch (const PeerError& e) {
    // The master's store closed the connection while this agent joined it (its agent ended or was
    // killed): as a store lost later, a retry may find a new one. A store this agent fails to host
    // (an IoError or ValueError) ends it as before.
    log(std::string("error: lost contact with the rendezvous store of the master node while joining: ") +
        e.what());
    return kJobTimedOut;
  }
  Rendezvous& rdzv = *joined;
  options_.master_port = rdzv.port();
  SignalWatcher signals;
  if (::isatty(STDERR_FILENO) == 1) {
    console_ = std::make_unique<Console>(STDERR_FILENO);
    progress_ = std::make_unique<ProgressChannel>(*console_);
  }
  if (options_.log_dir.empty() && !remove_run_dir_) log("worker log files are kept in " + run_dir_);
  auto interrupted = [&] { return signals.terminationSignal() != 0; };
  // Rounds: the group's starts. A failure restarts it (one of --max-restarts); an elastic job also
  // re-forms, without counting a restart, to admit a node that waits to join.
  restarts_ = 0;
  std::vector<std::string> members, hosts;  // the last round's nodes, to log who came and went
  // The master's agent ended or was killed during the rendezvous: its store is gone, as when it is
  // lost mid-job (the same exit code: a retry may find a new master). A refusal (ValueError: another
  // --nnodes, a node rank taken) ends the agent as a usage error.
  auto lostMaster = [&](const Error& e) {
    log(std::string(
            "error: lost contact with the rendezvous store of the master node during the rendezvous: ") +
        e.what());
    return kJobTimedOut;
  };
  for (int round = 0;; ++round) {
    std::optional<RendezvousResult> r;
    try {
      r = rdzv.join(round, options_.nproc_per_node, interrupted);
    } catch (const TimeoutError& e) {
      log(std::string("error: ") + e.what());
      return kJobTimedOut;  // a node that never arrived (not scheduled, not started yet) may next time
    } catch (const PeerError& e) {
      return lostMaster(e);  // the master's store closed the connection
    } catch (const IoError& e) {
      return lostMaster(e);  // another socket error on it
    }
    if (!r) {
      if (const int sig = signals.terminationSignal(); sig != 0) {
        log("stopped by " + signalName(sig) + " during the rendezvous, before any worker started");
        return 128 + sig;
      }
      std::optional<JobEnd> end = rdzv.ended();
      log(end && end->exit_code == 0 ? "the job finished before this node could join it"
                                     : "the job was stopped before this node could join it: " +
                                           (end ? end->report : std::string("(no word why)")));
      return end ? end->exit_code : kJobFailed;
    }
    round = r->round;
    if (rdzv.elastic()) logMembership(*r, members, hosts);
    members = r->members;
    hosts = r->hosts;
    Outcome outcome = runAttempt(round, rdzv, *r, signals);
    if (console_) console_->finish();
    auto leave = [&](Ms linger) {
      if (store_lost_) return;
      if (node_lost_) linger = std::min(linger, Ms(500));  // a silent node will not leave
      try {
        rdzv.leave(round, linger);
      } catch (const Error&) {
      }
    };
    if (outcome == Outcome::kSucceeded) {
      try {
        if (rdzv.elastic()) rdzv.publishComplete();  // a node still waiting to join ends too
      } catch (const Error&) {
      }
      leave(std::chrono::seconds(10));
      return kJobSucceeded;
    }
    if (outcome == Outcome::kInterrupted) {
      log("stopped by " + signalName(interrupt_signal_) + "; all workers were stopped");
      leave(std::chrono::seconds(2));
      return 128 + interrupt_signal_;
    }
    if (outcome == Outcome::kReform) continue;
    bool can_restart = outcome == Outcome::kFailed && restarts_ < options_.max_restarts && !store_lost_;
    writeReport(can_restart
                    ? "attempt " + std::to_string(round) + " failed; restarting the group (restart " +
                          std::to_string(restarts_ + 1) + " of " + std::to_string(options_.max_restarts) + ")"
                    : "job failed (run id '" + options_.run_id + "', attempt " + std::to_string(round) +
                          ", " + std::to_string(options_.max_restarts) + " restarts allowed)",
                report_);
    if (!can_restart) {
      leave(std::chrono::seconds(5));
      return exit_code_;
    }
    ++restarts_;
  }
}

void Agent::logMembership(const RendezvousResult& r, const std::vector<std::string>& before,
                          const std::vector<std::string>& before_hosts) const {
  auto named = [](const std::vector<std::string>& names) {
    std::string out;
    for (const auto& n : names) out += (out.empty() ? "'" : ", '") + n + "'";
    return out;
  };
  std::vector<std::string> came, went;
  for (size_t i = 0; i < r.members.size(); ++i)
    if (!before.empty() && std::find(before.begin(), before.end(), r.members[i]) == before.end())
      came.push_back(r.hosts[i]);
  for (size_t i = 0; i < before.size(); ++i)
    if (std::find(r.members.begin(), r.members.end(), before[i]) == r.members.end())
      went.push_back(before_hosts[i]);
  std::string line = "round " + std::to_string(r.round) + ": " + std::to_string(r.hosts.size()) + " node" +
                     (r.hosts.size() == 1 ? "" : "s") + " (of " + std::to_string(options_.min_nodes) + ":" +
                     std::to_string(options_.nnodes) + "), world size " +
                     std::to_string(r.layout.world_size) + ": " + named(r.hosts) +
                     "; this node is node rank " + std::to_string(r.layout.group_rank);
  if (before.empty() && r.round > 0) line += "; this node joins the job";
  if (!came.empty()) line += "; joined: " + named(came);
  if (!went.empty()) line += "; left: " + named(went);
  log(line);
}

void Agent::writeReport(const std::string& headline, const std::string& body) {
  std::string s = "[lockstep run] " + headline + "\n" + body;
  if (!s.empty() && s.back() != '\n') s += "\n";
  writeConsole(STDERR_FILENO, s);
}

// One attempt's parts, as the steps of the monitor loop use them.
struct Agent::Attempt {
  int number;
  Rendezvous& rdzv;
  const RendezvousResult& result;
  SignalWatcher& signals;
  WorkerGroup& group;
  Watchdog& watchdog;
};

Agent::Outcome Agent::runAttempt(int attempt, Rendezvous& rdzv, const RendezvousResult& r,
                                 SignalWatcher& signals) {
  ops_ = std::make_unique<comm::OpWatchTable>(r.layout.local_world_size);  // fresh for each attempt
  WorkerGroup group;
  group.start(workerSpecs(attempt, r));
  Watchdog watchdog(watchdogOptions(attempt, r), options_.nnodes > 1 ? &rdzv : nullptr);
  Attempt a{attempt, rdzv, r, signals, group, watchdog};
  return monitor(a);
}

std::vector<WorkerSpec> Agent::workerSpecs(int attempt, const RendezvousResult& r) const {
  WorkerSpecsOptions o;
  o.env.layout = r.layout;
  o.env.master_addr = r.worker_master_addr;
  o.env.master_port = r.worker_master_port;
  o.env.store_addr = options_.master_addr;
  o.env.store_port = options_.master_port;
  o.env.run_id = options_.run_id;
  o.env.restart_count = attempt;
  o.env.failure_restarts = restarts_;  // below the round once an elastic job re-formed to admit a node
  o.env.max_restarts = options_.max_restarts;
  o.env.timeout = timeout_;
  o.env.join_token = join_token_;
  o.program_path = program_path_;
  o.argv = command_;
  o.attempt_dir = run_dir_ + "/attempt_" + std::to_string(attempt);
  o.redirects = options_.redirects;
  o.tee = options_.tee;
  o.log_files = !options_.log_dir.empty();
  o.console = console_ != nullptr;
  o.progress_address = progress_ ? progress_->address() : "";
  o.op_watch_fd = ops_->fd();
  return launch::workerSpecs(o, currentEnvironment());
}

Ms Agent::watchdogInterval() const {
  return std::min(Ms(1000), std::max(toMs(options_.monitor_interval_s), timeout_ / 20));
}

WatchdogOptions Agent::watchdogOptions(int attempt, const RendezvousResult& r) {
  WatchdogOptions wo;
  wo.timeout = timeout_;
  wo.node_timeout = node_timeout_;
  wo.interval = watchdogInterval();
  wo.round = attempt;
  wo.node_rank = r.layout.group_rank;
  wo.nnodes = static_cast<int>(r.hosts.size());  // this round's (an elastic job's varies)
  wo.host = host_;
  wo.hosts = r.hosts;
  wo.first_ranks = {0};
  for (int n : r.nprocs) wo.first_ranks.push_back(wo.first_ranks.back() + n);
  wo.ops = ops_.get();
  wo.worker_store_addr = r.worker_master_addr;
  wo.worker_store_port = r.worker_master_port;
  wo.join_timeout = toMs(options_.rdzv_timeout_s);
  return wo;
}

Agent::Outcome Agent::monitor(Attempt& a) {
  const Ms interval = toMs(options_.monitor_interval_s);
  const bool multi_node = options_.nnodes > 1;
  const Ms wait = std::min(multi_node ? interval : Ms(1000), watchdogInterval());
  auto next_check = std::chrono::steady_clock::now() + interval;
  for (;;) {
    a.group.waitForEvents(a.signals.fd(), wait);
    if (int sig = a.signals.drain(); sig != 0) return stopForSignal(a, sig);
    auto failed = a.group.reap([&](pid_t pid) { return a.signals.exitOrder(pid); });
    if (!failed.empty()) return onWorkersFailed(a, failed);
    std::optional<std::string> watched;
    try {
      watched = a.watchdog.check(a.group);
    } catch (const Error& e) {
      return onStoreLost(a, e);
    }
    if (watched) return onWatchdog(a, *watched);
    if (a.group.allSucceeded()) return awaitOtherNodes(a);
    if (multi_node && std::chrono::steady_clock::now() >= next_check) {
      next_check = std::chrono::steady_clock::now() + interval;
      if (auto outcome = checkOtherNodes(a)) return *outcome;
    }
  }
}

Agent::Outcome Agent::stopForSignal(Attempt& a, int sig) {
  interrupt_signal_ = sig;
  try {
    a.rdzv.publishShutdown(
        {"the agent on host '" + host_ + "' was stopped by " + signalName(sig), 128 + sig});
  } catch (const Error&) {
  }
  a.group.stop(sig, toMs(options_.grace_period_s), a.signals.fd());
  return Outcome::kInterrupted;
}

std::string Agent::lostStoreReport(const Attempt& a, const Error& e) const {
  const std::string master = a.result.hosts.empty() ? "" : " on host '" + a.result.hosts.front() + "'";
  return "lost contact with the rendezvous store of the master node (node rank 0" + master + ") at " +
         options_.master_addr + ":" + std::to_string(options_.master_port) + ": " + e.what() + "\n";
}

Agent::Outcome Agent::onStoreLost(Attempt& a, const Error& e) {
  store_lost_ = true;
  report_ = lostStoreReport(a, e);
  exit_code_ = kJobTimedOut;
  return stopForRemote(a, Outcome::kStopped);
}

Agent::Outcome Agent::onWatchdog(Attempt& a, const std::string& watched) {
  report_ = watched;
  exit_code_ = kJobTimedOut;
  node_lost_ = a.watchdog.nodeLost();
  log("watchdog: " + report_.substr(0, report_.find('\n')));
  try {
    a.rdzv.publishFailure(a.number, {report_, exit_code_}, true);
    if (auto end = a.rdzv.failure(a.number)) adopt(*end);
  } catch (const Error& e) {
    store_lost_ = options_.nnodes > 1;
  }
  leaveRound(a);
  a.group.stop(SIGTERM, toMs(options_.grace_period_s), a.signals.fd());
  return Outcome::kFailed;
}

void Agent::leaveRound(Attempt& a) {
  if (options_.nnodes <= 1 || store_lost_) return;
  try {
    a.rdzv.beat(a.number, Watchdog::kLeftRound);
  } catch (const Error&) {
    // The store is gone: nobody is left to read the heartbeat either.
  }
}

namespace {

// The failed worker most likely to be the root cause, and whether it surely is (primary). A rank
// that reported its own error comes first, unless what it reported is a peer's lost connection;
// then a rank killed by a signal (not SIGABRT, which is how an uncaught exception ends) is the
// likelier root cause than one that exited with an error because its connections to it broke
// (gloo mid-exchange).
std::pair<size_t, bool> rootCause(const WorkerGroup& group, const std::vector<size_t>& failed) {
  std::optional<size_t> killed;
  for (size_t i : failed) {
    int sig = group.worker(i).termSignal();
    if (!killed && sig != 0 && sig != SIGABRT) killed = i;
  }
  auto reporter = group.firstErrorFileWriter(reportsLostPeer);
  return {reporter.value_or(killed.value_or(failed.front())), !reporter && killed.has_value()};
}

// Whether a failed rank says it lost a peer (gloo's "Connection closed/reset by peer", lockstep's
// "connections to ranks [..] broke (did they die?)", shm's "ranks [..] died"): a consequence of
// another rank's or node's end, not a failure of its own.
bool lostAPeer(const WorkerFailure& w) {
  for (const std::string* text : {&w.error_content, &w.stderr_tail}) {
    if (reportsLostPeer(*text) || text->find("broke (did they die?)") != std::string::npos ||
        text->find(" died") != std::string::npos)
      return true;
  }
  return false;
}

// Ranks other than root that failed on their own, not by the agent's stop: a rank whose exit made
// its peers abort may exit after them, so the user sees both.
std::string othersFailed(const WorkerGroup& group, size_t root) {
  std::string others;
  for (size_t i = 0; i < group.size(); ++i) {
    const auto& w = group.worker(i);
    if (i == root || !w.failed() || w.termSignal() == SIGTERM || w.termSignal() == SIGKILL) continue;
    others += "    rank " + std::to_string(group.spec(i).rank) + " " +
              describeExit(w.exitCode(), w.termSignal()) + "\n";
  }
  return others;
}

}  // namespace

Agent::Outcome Agent::onWorkersFailed(Attempt& a, const std::vector<size_t>& failed) {
  // Workers that end because the job is being stopped (another node's agent got a signal and its
  // ranks stopped after the step under way) are not a failure to report or restart for.
  if (options_.nnodes > 1) {
    try {
      if (auto why = a.rdzv.shutdown()) {
        adopt({"the job was stopped: " + why->report + "\n", why->exit_code});
        return stopForRemote(a, Outcome::kStopped);
      }
      // Workers that stopped because another node's did, for a re-formation, are no failure either.
      if (auto reform = checkReform(a, false)) return *reform;
    } catch (const Error&) {
      // The store is gone: the failure below is still this node's to report.
    }
  }
  auto [root, primary] = rootCause(a.group, failed);
  const WorkerFailure cause = a.group.failureOf(root, a.result.layout.group_rank, host_);
  report_ = formatRootCause(cause);
  exit_code_ = exitCodeOf(cause);
  try {
    if (!primary) {
      if (std::string s = a.watchdog.suspects(a.group); !s.empty()) {
        report_ = s + "  after which " + report_.substr(std::string("root cause: ").size());
        exit_code_ = kJobTimedOut;
        primary = true;
        node_lost_ = a.watchdog.nodeLost();
      }
    }
    a.rdzv.publishFailure(a.number, {report_, exit_code_}, primary);
  } catch (const Error& e) {
    store_lost_ = options_.nnodes > 1;
    if (store_lost_ && !primary && lostAPeer(cause)) {
      // This node's ranks failed because a peer went away, and the master's store is gone too:
      // the master node (its agent and ranks) is what was lost, not this node's rank.
      report_ = lostStoreReport(a, e) + "  after which " + report_.substr(std::string("root cause: ").size());
      exit_code_ = kJobTimedOut;
    } else {
      report_ += "(could not tell the other nodes: " + std::string(e.what()) + ")\n";
    }
  }
  leaveRound(a);
  a.group.stop(SIGTERM, toMs(options_.grace_period_s), a.signals.fd());
  if (!store_lost_) settleReport(a.number, a.rdzv, primary);
  if (std::string others = othersFailed(a.group, root); !others.empty())
    report_ += "  other ranks on this host that failed by themselves:\n" + others;
  return Outcome::kFailed;
}

std::optional<Agent::Outcome> Agent::checkReform(Attempt& a, bool may_request) {
  if (!a.rdzv.elastic()) return std::nullopt;
  std::optional<std::string> why = a.rdzv.reformRequested(a.number);
  const int nodes = static_cast<int>(a.result.hosts.size());
  if (!why && may_request && nodes < options_.nnodes) {
    if (const int n = a.rdzv.waiting(a.number); n > 0) {
      a.rdzv.requestReform(a.number, std::to_string(n) + " node" + (n == 1 ? " waits" : "s wait") +
                                         " to join and the job has " + std::to_string(nodes) +
                                         " of at most " + std::to_string(options_.nnodes));
      why = a.rdzv.reformRequested(a.number);
    }
  }
  if (!why) return std::nullopt;
  log("re-forming the job: " + *why + "; stopping this node's workers (lockstep train saves a checkpoint)");
  leaveRound(a);
  a.group.stop(SIGTERM, toMs(options_.grace_period_s), a.signals.fd());
  return Outcome::kReform;
}

std::optional<Agent::Outcome> Agent::checkOtherNodes(Attempt& a) {
  try {
    if (auto why = a.rdzv.shutdown()) {
      adopt({"the job was stopped: " + why->report + "\n", why->exit_code});
      return stopForRemote(a, Outcome::kStopped);
    }
    // A failure first: a node whose workers failed publishes it and then waits for the next round,
    // where it would otherwise look like a newcomer to admit without counting a restart.
    if (a.rdzv.failure(a.number)) {
      publishSuspects(a);
      leaveRound(a);
      a.group.stop(SIGTERM, toMs(options_.grace_period_s), a.signals.fd());
      settleReport(a.number, a.rdzv, false);
      return Outcome::kFailed;
    }
    if (auto reform = checkReform(a, true)) return reform;
  } catch (const Error& e) {
    return onStoreLost(a, e);
  }
  return std::nullopt;
}

void Agent::publishSuspects(Attempt& a) {
  std::string s = a.watchdog.suspects(a.group);
  if (s.empty()) return;
  node_lost_ = node_lost_ || a.watchdog.nodeLost();
  a.rdzv.publishFailure(a.number, {s, kJobTimedOut}, true);
}

void Agent::adopt(const JobEnd& end) {
  report_ = end.report;
  exit_code_ = end.exit_code;
}

void Agent::settleReport(int attempt, Rendezvous& rdzv, bool have_primary) {
  try {
    // The agent of a rank killed mid-exchange publishes within milliseconds of its peers' errors;
    // a second is ample, and is waited only when no primary cause is known yet.
    auto deadline =
        std::chrono::steady_clock::now() + (have_primary || options_.nnodes == 1 ? Ms(0) : Ms(1000));
    for (;;) {
      if (auto p = rdzv.primaryFailure(attempt)) {
        adopt(*p);
        return;
      }
      if (std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(Ms(20));
    }
    if (auto first = rdzv.failure(attempt)) adopt(*first);
  } catch (const Error&) {
    store_lost_ = options_.nnodes > 1;
  }
}

Agent::Outcome Agent::stopForRemote(Attempt& a, Outcome outcome) {
  leaveRound(a);
  a.group.stop(SIGTERM, toMs(options_.grace_period_s), a.signals.fd());
  return outcome;
}

Agent::Outcome Agent::awaitOtherNodes(Attempt& a) {
  // Descendants a successful worker left behind die with the attempt.
  a.group.stop(SIGTERM, toMs(options_.grace_period_s), a.signals.fd());
  try {
    a.rdzv.markSucceeded(a.number);
    const Ms interval = toMs(options_.monitor_interval_s);
    for (;;) {
      if (a.rdzv.allSucceeded(a.number)) return Outcome::kSucceeded;
      if (auto why = a.rdzv.shutdown()) {
        adopt({"the job was stopped: " + why->report + "\n", why->exit_code});
        return Outcome::kStopped;
      }
      if (a.rdzv.elastic()) {
        if (auto why = a.rdzv.reformRequested(a.number)) {
          log("re-forming the job although this node's workers finished: " + *why);
          return Outcome::kReform;
        }
      }
      if (auto remote = a.rdzv.failure(a.number)) {
        adopt(*remote);
        settleReport(a.number, a.rdzv, false);
        return Outcome::kFailed;
      }
      if (options_.nnodes > 1) {
        if (auto watched = a.watchdog.check(a.group)) {  // keeps beating; a silent node fails the job
          adopt({*watched, kJobTimedOut});
          node_lost_ = a.watchdog.nodeLost();
          a.rdzv.publishFailure(a.number, {report_, exit_code_}, true);
          return Outcome::kFailed;
        }
      }
      if (int sig = a.signals.drain(); sig != 0) {
        interrupt_signal_ = sig;
        a.rdzv.publishShutdown(
            {"the agent on host '" + host_ + "' was stopped by " + signalName(sig), 128 + sig});
        return Outcome::kInterrupted;
      }
      a.group.waitForEvents(a.signals.fd(), std::min(interval, Ms(50)));
    }
  } catch (const Error& e) {
    store_lost_ = true;
    report_ = "this node's workers succeeded, but the rendezvous store at " + options_.master_addr + ":" +
              std::to_string(options_.master_port) + " was lost before every node finished: " + e.what() +
              "\n";
    exit_code_ = kJobTimedOut;
    return Outcome::kStopped;
  }
}

}  // namespace lockstep::launch
