#include "lockstep/launch/watchdog.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "lockstep/comm/op_watch.h"
#include "lockstep/launch/rendezvous.h"
#include "lockstep/launch/tcp_sockets.h"
#include "lockstep/launch/worker_group.h"

namespace lockstep::launch {

namespace {

std::string seconds(std::chrono::steady_clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", std::chrono::duration<double>(d).count());
  return buf;
}

}  // namespace

char processState(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!in || !std::getline(in, stat)) return '?';
  // "PID (COMM) STATE ...": COMM may hold spaces and parentheses, so look after the last ')'.
  auto close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return '?';
  return stat[close + 2];
}

Watchdog::Watchdog(const WatchdogOptions& options, Rendezvous* rdzv)
    : options_(options), rdzv_(rdzv), next_check_(Clock::now()) {
  last_beat_.assign(static_cast<size_t>(options_.nnodes), "");
  last_change_.assign(static_cast<size_t>(options_.nnodes), Clock::now());
}

void Watchdog::observeWorkers(const WorkerGroup& group, Clock::time_point now) {
  stopped_since_.resize(group.size());
  for (size_t i = 0; i < group.size(); ++i) {
    const auto& w = group.worker(i);
    char state = w.exited() ? '?' : processState(w.pid());
    bool stopped = state == 'T' || state == 't';
    if (!stopped) {
      stopped_since_[i].reset();
    } else if (!stopped_since_[i]) {
      stopped_since_[i] = now;
    }
  }
}

void Watchdog::observeNodes(Clock::time_point now) {
  if (rdzv_ == nullptr || options_.nnodes <= 1) return;
  rdzv_->beat(options_.round, ++beats_);
  auto beats = rdzv_->heartbeats(options_.round);
  for (size_t i = 0; i < beats.size() && i < last_beat_.size(); ++i) {
    if (beats[i] == std::to_string(kLeftRound)) {  // gone on purpose, after saying why: not silent
      last_beat_[i] = beats[i];
      last_change_[i] = now;
      continue;
    }
    if (beats[i] != last_beat_[i]) {
      last_beat_[i] = beats[i];
      last_change_[i] = now;
    }
  }
}

std::string Watchdog::where(const WorkerGroup& group, size_t i) const {
  return "rank " + std::to_string(group.spec(i).rank) + " (local rank " +
         std::to_string(group.spec(i).local_rank) + " on host '" + options_.host + "', node rank " +
         std::to_string(options_.node_rank) + ", pid " + std::to_string(group.worker(i).pid()) + ")";
}

void Watchdog::observeWorkerStore(const WorkerGroup& group, Clock::time_point now) {
  if (options_.worker_store_port == 0 || joins_over_) return;
  const int port = options_.worker_store_port;
  const bool publish = rdzv_ != nullptr && options_.nnodes > 1;
  // Rank 0 (on node 0) says when the store opens and closes; node 0's agent tells the others. Until
  // it opens only rank 0 is looked at: a job that never uses it costs one look a second.
  for (size_t i = 0; i < group.size(); ++i) {
    if (group.spec(i).rank != 0 || group.worker(i).exited()) continue;
    bool listening = false;
    for (const TcpSocket& s : processTcpSockets(group.worker(i).pid()))
      listening = listening || (s.state == kTcpListen && s.local_port == port);
    if (listening && !worker_store_open_) {
      worker_store_open_ = now;
      if (publish) rdzv_->publishWorkerStore(options_.round, "open");
    } else if (!listening && worker_store_open_) {
      joins_over_ = true;
      if (publish) rdzv_->publishWorkerStore(options_.round, "closed");
      return;
    }
  }
  if (!worker_store_open_ && publish && options_.node_rank != 0) {
    auto word = rdzv_->workerStore(options_.round);
    if (word == "open") worker_store_open_ = now;
    if (word == "closed") joins_over_ = true;
  }
  if (!worker_store_open_) return;
  joined_.resize(group.size(), false);
  bool all_joined = true;
  for (size_t i = 0; i < group.size(); ++i) {
    if (joined_[i] || group.worker(i).exited()) continue;
    for (const TcpSocket& s : processTcpSockets(group.worker(i).pid()))
      joined_[i] = joined_[i] || (s.state == kTcpEstablished && s.remote_port == port);
    all_joined = all_joined && joined_[i];
  }
  joins_over_ = all_joined;
}

std::string Watchdog::unjoinedReport(const WorkerGroup& group, Clock::time_point now) const {
  std::string out;
  if (!worker_store_open_ || joins_over_ || now - *worker_store_open_ < options_.join_timeout) return out;
  const std::string store = options_.worker_store_addr + ":" + std::to_string(options_.worker_store_port);
  for (size_t i = 0; i < group.size() && i < joined_.size(); ++i) {
    if (joined_[i] || group.worker(i).exited()) continue;
    out += "root cause: " + where(group, i) + " has not connected to the workers' store at " + store +
           " (MASTER_ADDR:MASTER_PORT, hosted by rank 0) within --rdzv-timeout (" +
           seconds(options_.join_timeout) + ") of rank 0 opening it: host '" + options_.host +
           "' cannot reach that address (a firewall, no route to node 0), the rank dials another "
           "MASTER_ADDR/MASTER_PORT than it was given, or it never calls init_process_group\n";
  }
  return out;
}

std::string Watchdog::stuckReport(const WorkerGroup& group, std::chrono::milliseconds grace) const {
  std::string out;
  if (options_.ops == nullptr) return out;
  const int64_t now_ns = comm::monotonicNs();
  for (size_t i = 0; i < group.size(); ++i) {
    const auto& w = group.worker(i);
    const int slot = group.spec(i).local_rank;
    if (w.exited() || slot < 0 || slot >= options_.ops->slots()) continue;
    if (i < stopped_since_.size() && stopped_since_[i]) continue;  // said as stopped instead
    const comm::OpWatchSnapshot s = options_.ops->read(slot);
    // Any process of the worker may have written the slot (a wrapper script's child, say): the
    // table is fresh for each attempt, so what is in it is this attempt's.
    if (!s.busy() || s.pid == 0) continue;
    const auto busy = s.busyFor(now_ns);
    if (busy <= std::chrono::milliseconds(s.timeout_ms) + grace) continue;
    const std::string who = s.pid == w.pid()
                                ? where(group, i)
                                : where(group, i) + ", through its process " + std::to_string(s.pid);
    out +=
        "root cause: " + who + " has been inside " + s.op + " for " + seconds(busy) +
        ", past that op's own timeout of " + seconds(std::chrono::milliseconds(s.timeout_ms)) +
        ": it is stuck in the backend (the op does not honour its deadline: a backend bug, or a system call "
        "that never returns); `gdb -p " +
        std::to_string(s.pid) + "` shows where\n";
  }
  return out;
}

std::string Watchdog::stoppedReport(const WorkerGroup& group, Clock::time_point now,
                                    std::chrono::milliseconds at_least) const {
  std::string out;
  for (size_t i = 0; i < stopped_since_.size() && i < group.size(); ++i) {
    if (!stopped_since_[i] || group.worker(i).exited()) continue;
    auto d = now - *stopped_since_[i];
    if (d < at_least) continue;
    out += "root cause: " + where(group, i) + " has been stopped (SIGSTOP, Ctrl-Z or a debugger) for " +
           seconds(d) + ": its peers cannot finish a collective without it (watchdog timeout " +
           seconds(options_.timeout) + ")\n";
  }
  return out;
}

std::string Watchdog::silentReport(Clock::time_point now, std::chrono::milliseconds at_least) {
  std::string out;
  if (rdzv_ == nullptr) return out;
  for (int i = 0; i < options_.nnodes; ++i) {
    if (i == options_.node_rank) continue;
    auto d = now - last_change_[static_cast<size_t>(i)];
    if (d < at_least) continue;
    node_lost_ = true;
    std::string host =
        static_cast<size_t>(i) < options_.hosts.size() ? options_.hosts[static_cast<size_t>(i)] : "?";
    std::string ranks;
    if (static_cast<size_t>(i) + 1 < options_.first_ranks.size()) {
      int first = options_.first_ranks[static_cast<size_t>(i)];
      int last = options_.first_ranks[static_cast<size_t>(i) + 1] - 1;
      ranks = first == last ? " (rank " + std::to_string(first) + ")"
                            : " (ranks " + std::to_string(first) + "-" + std::to_string(last) + ")";
    }
    out += "root cause: node rank " + std::to_string(i) + " on host '" + host + "'" + ranks +
           " has sent no heartbeat for " + seconds(d) +
           ": its agent was killed or stopped, its host went down, or the network to it is cut (seen from "
           "host '" +
           options_.host + "', node rank " + std::to_string(options_.node_rank) + ")\n";
  }
  return out;
}

std::optional<std::string> Watchdog::check(const WorkerGroup& group) {
  auto now = Clock::now();
  if (now < next_check_) return std::nullopt;
  next_check_ = now + options_.interval;
  observeWorkers(group, now);
  observeNodes(now);
  observeWorkerStore(group, now);
  std::string report = stoppedReport(group, now, options_.timeout) + stuckReport(group, options_.op_grace) +
                       unjoinedReport(group, now) + silentReport(now, options_.node_timeout);
  if (report.empty()) return std::nullopt;
  return report;
}

std::string Watchdog::suspects(const WorkerGroup& group) {
  auto now = Clock::now();
  observeWorkers(group, now);
  observeNodes(now);  // fresh: a node is silent only if its counter did not move since the last look
  return stoppedReport(group, now, std::chrono::milliseconds(0)) +
         stuckReport(group, std::chrono::milliseconds(0)) + silentReport(now, 3 * options_.interval);
}

}  // namespace lockstep::launch
