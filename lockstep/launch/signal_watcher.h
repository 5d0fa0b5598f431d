#pragma once
// Turns SIGCHLD, SIGINT, SIGTERM and SIGHUP into bytes on a pipe the agent's loop polls, so a
// worker's exit or a user's Ctrl-C wakes it at once. One per process; restores the previous
// handlers when destroyed.
#include <sys/types.h>

#include <csignal>
#include <cstdint>

namespace lockstep::launch {

class SignalWatcher {
 public:
  SignalWatcher();
  ~SignalWatcher();
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  /// The read end to poll for POLLIN.
  int fd() const;
  /// Empties the pipe. Returns the first termination signal received so far (SIGINT, SIGTERM,
  /// SIGHUP), or 0 when none.
  int drain();
  /// The first termination signal received so far, or 0.
  int terminationSignal() const;
  /// Position of pid among the children whose exit was signalled so far (0 = first), or
  /// UINT64_MAX when its SIGCHLD was merged with another's. Orders near-simultaneous failures.
  uint64_t exitOrder(pid_t pid) const;

 private:
  struct sigaction old_[4];
};

}  // namespace lockstep::launch
