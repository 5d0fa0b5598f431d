#pragma once
// Turns SIGCHLD, SIGINT, SIGTERM and SIGHUP into bytes on a pipe the agent's loop polls, so a
// worker's exit or a user's Ctrl-C wakes it at once. One per process; restores the previous
// handlers when destroyed.
#include <csignal>

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

 private:
  struct sigaction old_[4];
};

}  // namespace lockstep::launch
