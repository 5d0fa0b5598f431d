#pragma once
// What rank 0 shows on stderr while training: the memory report at the start, one progress line,
// drawn by the agent that owns the terminal when there is one (launch/progress_channel.h), else
// redrawn here when stderr is a terminal, else plain lines every steps_per_print steps; each
// validation; and at the end the activation checkpointing profile and a language model's samples.
#include <chrono>
#include <deque>
#include <memory>

#include "lockstep/launch/progress_line.h"
#include "lockstep/launch/progress_sender.h"
#include "lockstep/train/monitor/run_observer.h"

namespace lockstep::train {

using launch::formatDuration;

/// A language model's throughput terms for the progress line: tokens per sample (0: not a language
/// model), a training token's FLOPs (train/monitor/model_flops.h) and the job's peak FLOP/s (its
/// GPUs at their dense bf16 peak; 0 when unknown: no MFU shown).
struct ModelThroughput {
  int64_t tokens_per_sample = 0;
  double flops_per_token = 0;
  double job_peak_flops = 0;
};

struct ProgressOptions {
  int64_t epochs = 1;
  int64_t total_steps = 0;  // for the ETA
  int64_t steps_per_print = 10;
  bool tty = false;                 // a redrawn line instead of plain lines (when no agent draws)
  double rate_window_seconds = 10;  // the shown samples/s is over this recent window
  ModelThroughput throughput{};     // a language model's tokens/s and MFU
};

/// Not thread-safe; rank 0 only.
class ProgressLine final : public RunObserver {
 public:
  explicit ProgressLine(const ProgressOptions& options);

  void onStart(const RunStart& start) override;
  void onStep(const StepMetrics& m) override;
  void onEvaluation(const Evaluation& e) override;
  void onEnd(const TrainSummary& s) override;

 private:
  /// Ends the drawn line (terminal mode).
  void finishLine();
  void show(const launch::ProgressReport& r);

  ProgressOptions options_;
  std::unique_ptr<launch::ProgressSender> sender_;
  std::chrono::steady_clock::time_point last_draw_;
  struct Point {
    std::chrono::steady_clock::time_point time;
    int64_t samples;
    double data_wait_seconds;
  };
  std::deque<Point> window_;
  bool bar_open_ = false;
  launch::ProgressReport last_{};  // the newest step's report
  bool last_shown_ = true;         // drawn or sent (updates are rate-limited)
};

}  // namespace lockstep::train
