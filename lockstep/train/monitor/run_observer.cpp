#include "lockstep/train/monitor/run_observer.h"

namespace lockstep::train {

void RunObservers::onStart(const RunStart& e) {
  for (auto& o : observers_) o->onStart(e);
}

void RunObservers::onStep(const StepMetrics& e) {
  for (auto& o : observers_) o->onStep(e);
}

void RunObservers::onEvaluation(const Evaluation& e) {
  for (auto& o : observers_) o->onEvaluation(e);
}

void RunObservers::onCheckpoint(const CheckpointSaved& e) {
  for (auto& o : observers_) o->onCheckpoint(e);
}

void RunObservers::onEnd(const TrainSummary& e) {
  for (auto& o : observers_) o->onEnd(e);
}

}  // namespace lockstep::train
