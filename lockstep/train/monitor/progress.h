#pragma once
// What rank 0 shows and records while training. Shows: one progress line, drawn by the agent
// that owns the terminal when there is one (launch/progress_channel.h), else redrawn here when
// stderr is a terminal, else plain lines every steps_per_print steps. Records: metrics.csv and
// TensorBoard scalars, both flushed every steps_per_print steps so that a crash loses at most one
// print interval.
#include <chrono>
#include <cstdio>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/launch/progress_line.h"
#include "lockstep/launch/progress_sender.h"
#include "lockstep/train/monitor/event_writer.h"

namespace lockstep::train {

using launch::formatDuration;

struct StepMetrics {
  int64_t epoch = 0;  // 0-based
  int64_t step = 0;   // global optimizer steps so far
  double loss = 0;
  double lr = 0;
  double samples_per_sec = 0;  // since the start, training time only (what metrics.csv records)
  int64_t samples = 0;         // training samples (all ranks) so far in this process
  /// fp16's loss scale and the steps skipped for an overflow so far; logged when has_loss_scale.
  bool has_loss_scale = false;
  double loss_scale = 1;
  int64_t skipped_steps = 0;
};

struct ProgressOptions {
  int64_t epochs = 1;
  int64_t total_steps = 0;  // for the ETA
  int64_t steps_per_print = 10;
  bool tty = false;                 // a redrawn line instead of plain lines (when no agent draws)
  std::string csv_path;             // empty: no CSV
  std::string tensorboard_dir;      // empty: no event file
  double rate_window_seconds = 10;  // the shown samples/s is over this recent window
};

/// metrics.csv's header: the step's wall time (Unix seconds, as TensorBoard's) is the last column.
constexpr const char* kMetricsCsvHeader = "epoch,step,metric,value,wall_time";

/// Not thread-safe; rank 0 only.
class Progress {
 public:
  explicit Progress(const ProgressOptions& options);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  void onStep(const StepMetrics& m);
  void onValidation(int64_t epoch, int64_t step, double loss, double accuracy);
  /// The final evaluation on the test set (test/loss, test/accuracy, as seed 001 logs them).
  void onTest(int64_t epoch, int64_t step, double loss, double accuracy);
  /// Ends the drawn line (terminal mode).
  void finishLine();

 private:
  void record(int64_t epoch, int64_t step, const std::vector<std::pair<std::string, double>>& values);
  void flush();
  void show(const launch::ProgressReport& r);
  ProgressOptions options_;
  std::unique_ptr<EventWriter> events_;
  std::unique_ptr<launch::ProgressSender> sender_;
  FILE* csv_ = nullptr;
  std::chrono::steady_clock::time_point last_draw_;
  std::deque<std::pair<std::chrono::steady_clock::time_point, int64_t>> window_;  // (time, samples)
  bool bar_open_ = false;
  launch::ProgressReport last_{};  // the newest step's report
  bool last_shown_ = true;         // drawn or sent (updates are rate-limited)
};

}  // namespace lockstep::train
