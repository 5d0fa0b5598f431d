#pragma once
// Where a training run's time goes: training, evaluation and checkpoint writes, timed apart so
// that throughput counts training alone.
#include <chrono>
#include <functional>

#include "lockstep/train/monitor/run_summary.h"

namespace lockstep::train {

/// Seconds since t on the steady clock.
inline double secondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

/// Started when made. Not thread-safe.
class RunClock {
 public:
  double trainSeconds() const { return secondsSince(start_) - eval_seconds_ - checkpoint_seconds_; }
  void timeEvaluation(const std::function<void()>& fn) { timed(eval_seconds_, fn); }
  void timeCheckpoint(const std::function<void()>& fn) { timed(checkpoint_seconds_, fn); }
  /// One clock reading for all, so that train + eval + checkpoint is wall exactly (two readings
  /// drift apart when the machine is loaded).
  void fill(TrainSummary& s) const {
    s.wall_seconds = secondsSince(start_);
    s.train_seconds = s.wall_seconds - eval_seconds_ - checkpoint_seconds_;
    s.eval_seconds = eval_seconds_;
    s.checkpoint_seconds = checkpoint_seconds_;
  }

 private:
  static void timed(double& total, const std::function<void()>& fn) {
    const auto t = std::chrono::steady_clock::now();
    fn();
    total += secondsSince(t);
  }

  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  double eval_seconds_ = 0, checkpoint_seconds_ = 0;
};

}  // namespace lockstep::train
