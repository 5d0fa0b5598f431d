#pragma once
// The workers of one attempt on this node: started together, watched together, stopped
// together (SIGTERM to every process group, SIGKILL after the grace period, then any stray
// descendant). Not thread-safe: the agent's loop owns it.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/launch/failure_report.h"
#include "lockstep/launch/worker_process.h"

namespace lockstep::launch {

/// One worker to start and who it is.
struct WorkerSpec {
  int rank = 0;
  int local_rank = 0;
  std::string error_file;
  WorkerProcessOptions process;
};

class WorkerGroup {
 public:
  WorkerGroup() = default;
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  /// Starts every worker; on a spawn error, stops those already started and rethrows.
  void start(std::vector<WorkerSpec> specs);
  /// Sleeps until a worker writes output, `wake_fd` (the signal pipe) is readable, or timeout;
  /// forwards what the workers wrote.
  void waitForEvents(int wake_fd, std::chrono::milliseconds timeout);
  /// Reaps workers that have exited; returns the indices of those that failed, earliest exit
  /// first by exit_order(pid) when given (ties and unknowns by rank).
  std::vector<size_t> reap(const std::function<uint64_t(pid_t)>& exit_order = {});
  /// The worker that wrote its error file first (by modification time) among those that failed
  /// or are still running, if any wrote one: a worker that reports its own error is the likelier
  /// root cause than peers that died of its exit (torchelastic chooses the same way). Error files
  /// whose content `secondary` calls a consequence of another rank's failure are passed over.
  std::optional<size_t> firstErrorFileWriter(
      const std::function<bool(const std::string&)>& secondary = {}) const;
  /// True when every worker has exited with code 0.
  bool allSucceeded() const;
  /// Stops the group: `sig` to every running worker's process group, up to `grace` for them to
  /// exit, then SIGKILL to every group and every stray descendant. Idempotent.
  void stop(int sig, std::chrono::milliseconds grace, int wake_fd);
  /// The failure record of worker i (which must have failed).
  WorkerFailure failureOf(size_t i, int group_rank, const std::string& host) const;

  size_t size() const { return workers_.size(); }
  const WorkerSpec& spec(size_t i) const { return specs_[i]; }
  const WorkerProcess& worker(size_t i) const { return *workers_[i]; }

 private:
  std::vector<WorkerSpec> specs_;
  std::vector<std::unique_ptr<WorkerProcess>> workers_;
  std::vector<bool> reported_;
  std::vector<double> exit_time_;
  bool stopped_ = false;
};

}  // namespace lockstep::launch
