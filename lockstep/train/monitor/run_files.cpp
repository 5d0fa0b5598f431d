#include "lockstep/train/monitor/run_files.h"

#include <cstdio>

#include "lockstep/train/monitor/report.h"
#include "lockstep/util/error.h"
#include "lockstep/util/file.h"

namespace lockstep::train {

RunFiles::RunFiles(std::string output_dir, MetricsPaths metrics)
    : dir_(std::move(output_dir)), metrics_(std::move(metrics)) {}

void RunFiles::onStart(const RunStart& start) {
  nlohmann::json run = describeRun(*start.config, start.facts);
  run["metrics_csv"] = metrics_.csv;
  if (!metrics_.tensorboard.empty()) run["tensorboard_dir"] = metrics_.tensorboard;
  // (names read from the disk, an image folder's class folders, may hold bytes that are not
  // UTF-8: written as U+FFFD, as torch's json would refuse them)
  file::writeAtomic(dir_ + "/run.json",
                    run.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

void RunFiles::onEvaluation(const Evaluation&) {
  writeReport();
  evaluated_ = true;
}

// An epoch's checkpoint is written after its validation was told: the report is written again to
// list it (not after every checkpoint.every_steps save: each report reads the whole metrics.csv).
void RunFiles::onCheckpoint(const CheckpointSaved&) {
  if (evaluated_) writeReport();
  evaluated_ = false;
}

void RunFiles::onEnd(const TrainSummary& s) {
  file::writeAtomic(dir_ + "/summary.json",
                    toJson(s).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  writeReport();
}

void RunFiles::writeReport() const {
  try {
    train::writeReport({dir_}, dir_ + "/report.html");
  } catch (const Error& e) {
    std::fprintf(stderr, "warning: could not write %s/report.html: %s\n", dir_.c_str(), e.what());
  }
}

}  // namespace lockstep::train
