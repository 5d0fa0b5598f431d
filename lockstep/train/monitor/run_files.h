#pragma once
// The run's own files in its output directory, written by rank 0: run.json when training starts
// (run_info.h), report.html at every evaluation (again after its checkpoint) and at the end (report.h;
// reloading it during a run is a live view) and summary.json at the end (run_summary.h).
#include <string>

#include "lockstep/train/monitor/metrics_log.h"
#include "lockstep/train/monitor/run_observer.h"

namespace lockstep::train {

/// Not thread-safe; rank 0 only. IoError naming run.json or summary.json when it cannot be
/// written; a report that cannot be written is a warning (training goes on).
class RunFiles final : public RunObserver {
 public:
  /// metrics: where the metrics go, recorded in run.json for `lockstep report`.
  RunFiles(std::string output_dir, MetricsPaths metrics);

  void onStart(const RunStart& start) override;
  void onEvaluation(const Evaluation& e) override;
  void onCheckpoint(const CheckpointSaved& e) override;
  void onEnd(const TrainSummary& s) override;

 private:
  void writeReport() const;

  std::string dir_;
  MetricsPaths metrics_;
  bool evaluated_ = false;  // an evaluation was told since the last checkpoint
};

}  // namespace lockstep::train
