#pragma once
// What rank 0 shows and records while training: a progress bar on a terminal or plain lines every
// steps_per_print steps otherwise, plus metrics.csv and TensorBoard scalars.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "lockstep/train/event_writer.h"

namespace lockstep::train {

struct StepMetrics {
  int64_t epoch = 0;  // 0-based
  int64_t step = 0;   // global optimizer steps so far
  double loss = 0;
  double lr = 0;
  double samples_per_sec = 0;
  /// fp16's loss scale and the steps skipped for an overflow so far; logged when has_loss_scale.
  bool has_loss_scale = false;
  double loss_scale = 1;
  int64_t skipped_steps = 0;
};

/// "1h02m", "3m05s", "12s".
std::string formatDuration(double seconds);

struct ProgressOptions {
  int64_t epochs = 1;
  int64_t total_steps = 0;  // for the ETA
  int64_t steps_per_print = 10;
  bool tty = false;             // a redrawn bar instead of lines
  std::string csv_path;         // empty: no CSV
  std::string tensorboard_dir;  // empty: no event file
};

/// Not thread-safe; rank 0 only.
class Progress {
 public:
  explicit Progress(const ProgressOptions& options);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  void onStep(const StepMetrics& m);
  void onValidation(int64_t epoch, int64_t step, double loss, double accuracy);
  /// Ends the bar's line (terminal mode).
  void finishLine();

 private:
  void writeCsv(int64_t epoch, int64_t step, const std::string& name, double value);
  ProgressOptions options_;
  std::unique_ptr<EventWriter> events_;
  FILE* csv_ = nullptr;
  std::chrono::steady_clock::time_point start_, last_draw_;
  int64_t first_step_ = -1;
  bool bar_open_ = false;
};

}  // namespace lockstep::train
