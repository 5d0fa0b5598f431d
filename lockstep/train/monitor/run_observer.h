#pragma once
// The training loop's outputs as observers of it: the loop tells what happens (the run starts, a
// step ends, an evaluation, a checkpoint, the end) and each output (the progress line, the metrics
// files, the run files) decides what to show or write. The loop never names an output, so one is
// added or dropped without touching it. Observers run on rank 0 only, in the order added.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/parallel/memory_report.h"
#include "lockstep/train/config/config.h"
#include "lockstep/train/monitor/run_info.h"
#include "lockstep/train/monitor/run_summary.h"

namespace lockstep::train {

struct RunStart {
  const TrainConfig* config = nullptr;
  RunFacts facts;
  /// Each rank's bytes of parameters, gradients and optimizer states, in rank order.
  std::vector<parallel::ModelStateBytes> memory;
};

struct StepMetrics {
  int64_t epoch = 0;  // 0-based
  int64_t step = 0;   // global optimizer steps so far
  double loss = 0;    // the mean over every rank's micro-batches at print steps
  double lr = 0;
  double samples_per_sec = 0;  // since the start, training time only (what metrics.csv records)
  int64_t samples = 0;         // training samples (all ranks) so far in this process
  /// fp16's loss scale and the steps skipped for an overflow so far; logged when has_loss_scale.
  bool has_loss_scale = false;
  double loss_scale = 1;
  int64_t skipped_steps = 0;
  /// Seconds this process (rank 0) has waited for its batches so far (DataLoader::waitSeconds).
  double data_wait_seconds = 0;
};

/// A validation at the end of an epoch.
struct Evaluation {
  int64_t epoch = 0;  // 0-based
  int64_t step = 0;
  double loss = 0;
  double accuracy = 0;
};

struct CheckpointSaved {
  int64_t step = 0;
  std::string path;
};

/// Every hook does nothing unless overridden. Not thread-safe.
class RunObserver {
 public:
  virtual ~RunObserver() = default;
  /// Before the first step (after a resume).
  virtual void onStart(const RunStart&) {}
  /// After each optimizer step.
  virtual void onStep(const StepMetrics&) {}
  /// After each validation (its time counts as evaluation's, not training's).
  virtual void onEvaluation(const Evaluation&) {}
  /// After each checkpoint written.
  virtual void onCheckpoint(const CheckpointSaved&) {}
  /// After the test evaluation, with the run's results; the model file is written.
  virtual void onEnd(const TrainSummary&) {}
};

/// Observers called in the order added; empty on the ranks that write nothing.
class RunObservers final : public RunObserver {
 public:
  void add(std::unique_ptr<RunObserver> observer) { observers_.push_back(std::move(observer)); }
  void onStart(const RunStart& e) override;
  void onStep(const StepMetrics& e) override;
  void onEvaluation(const Evaluation& e) override;
  void onCheckpoint(const CheckpointSaved& e) override;
  void onEnd(const TrainSummary& e) override;

 private:
  std::vector<std::unique_ptr<RunObserver>> observers_;
};

}  // namespace lockstep::train
