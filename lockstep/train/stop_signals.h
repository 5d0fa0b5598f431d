#pragma once
// SIGTERM (the kubelet's, Slurm's, a launcher's), SIGINT and SIGHUP as a request to stop training
// at the next step boundary, with a checkpoint, instead of ending the process mid-step: the ranks
// agree on the step (trainer.cpp), save it, and exit with 128 + the signal, the code a cluster's
// restart policy reads as "stopped from outside, retry" (docs/deploy.md). Another signal 2 s or
// more after the first ends the process at once (128 + that signal), without a checkpoint: for a
// rank blocked where no step boundary comes.
#include <csignal>

namespace lockstep::train {

/// One at a time per process; restores the previous handlers when destroyed. A signal the process
/// ignored when it was created (SIGHUP under nohup) stays ignored.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  /// The first of the signals received since construction, or 0. Thread-safe.
  int received() const;

 private:
  struct sigaction old_[3];
};

}  // namespace lockstep::train
