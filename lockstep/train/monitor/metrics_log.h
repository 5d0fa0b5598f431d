#pragma once
// What rank 0 records while training: metrics.csv and TensorBoard scalars (train/, val/, test/ and
// memory/ tags), both flushed every steps_per_print steps so that a crash loses at most one print
// interval.
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/train/monitor/csv_monitor.h"
#include "lockstep/train/monitor/event_writer.h"
#include "lockstep/train/monitor/run_observer.h"

namespace lockstep::train {

/// metrics.csv's header: the step's wall time (Unix seconds, as TensorBoard's) is the last column.
constexpr const char* kMetricsCsvHeader = "epoch,step,metric,value,wall_time";

struct MetricsPaths {
  std::string csv;          // empty: no CSV
  std::string tensorboard;  // empty: no event file
  /// csv_monitor's directory for DeepSpeed's one-CSV-per-tag files (csv_monitor.h); empty: none.
  std::string csv_monitor;
};
/// Where a run's metrics go: the csv_monitor section's path (else DIR/metrics.csv), the
/// tensorboard section's (when enabled), and when csv_monitor is enabled its DeepSpeed files in
/// output_path/job_name (DIR/job_name without an output_path). Pure.
MetricsPaths metricsPaths(const TrainConfig& config, const std::string& output_dir);

/// Not thread-safe; rank 0 only. IoError naming the file when it cannot be written.
class MetricsLog final : public RunObserver {
 public:
  MetricsLog(const MetricsPaths& paths, int64_t steps_per_print);
  ~MetricsLog() override;
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  /// Reads the global batch size, DeepSpeed's step unit in the csv_monitor files.
  void onStart(const RunStart& s) override;
  /// metrics.csv and TensorBoard every steps_per_print steps; the csv_monitor files every step, as
  /// DeepSpeed's engines write them: Train/Samples/train_loss (its pipeline engine's; rank 0's loss, the mean
  /// over every rank at print steps), Train/Samples/lr and with fp16 Train/Samples/loss_scale, at step =
  /// samples trained (steps x train_batch_size).
  void onStep(const StepMetrics& m) override;
  void onEvaluation(const Evaluation& e) override;
  /// The final evaluation on the test set (test/loss, test/accuracy, as seed 001 logs them).
  void onEnd(const TrainSummary& s) override;

 private:
  void record(int64_t epoch, int64_t step, const std::vector<std::pair<std::string, double>>& values);
  void flush();

  MetricsPaths paths_;
  int64_t steps_per_print_;
  // train/data_wait_ms: the mean wait per step since the last logged step.
  int64_t steps_since_logged_ = 0;
  double data_wait_logged_ = 0;  // data_wait_seconds at the last logged step
  std::unique_ptr<EventWriter> events_;
  std::unique_ptr<CsvMonitor> csv_monitor_;
  int64_t train_batch_size_ = 0;
  FILE* csv_ = nullptr;
};

}  // namespace lockstep::train
