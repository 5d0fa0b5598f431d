#include "lockstep/train/monitor/metrics_log.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "lockstep/train/monitor/run_info.h"
#include "lockstep/util/error.h"
#include "lockstep/util/file.h"

namespace lockstep::train {

namespace {

double unixTime() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

MetricsPaths metricsPaths(const TrainConfig& c, const std::string& output_dir) {
  MetricsPaths p;
  if (c.csv_monitor.enabled) {
    std::string dir = c.csv_monitor.output_path.empty() ? output_dir : c.csv_monitor.output_path;
    p.csv = dir + (c.csv_monitor.output_path.empty() ? "" : "/" + c.csv_monitor.job_name) + "/metrics.csv";
    p.csv_monitor = dir + "/" + c.csv_monitor.job_name;
  } else {
    p.csv = output_dir + "/metrics.csv";
  }
  if (c.tensorboard.enabled) {
    std::string dir =
        c.tensorboard.output_path.empty() ? output_dir + "/tensorboard" : c.tensorboard.output_path;
    p.tensorboard = dir + "/" + c.tensorboard.job_name;
  }
  return p;
}

MetricsLog::MetricsLog(const MetricsPaths& paths, int64_t steps_per_print)
    : paths_(paths), steps_per_print_(steps_per_print) {
  if (!paths_.tensorboard.empty()) events_ = std::make_unique<EventWriter>(paths_.tensorboard);
  if (!paths_.csv_monitor.empty()) csv_monitor_ = std::make_unique<CsvMonitor>(paths_.csv_monitor);
  if (!paths_.csv.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(paths_.csv).parent_path(), ec);
    // Appended to, so a resumed job keeps the rows of the runs before it (those past the
    // checkpoint it resumes from appear twice, as in TensorBoard's event files); a row a full disk
    // or a kill cut short is dropped first.
    const file::AppendedLines csv = file::openLinesForAppend(paths_.csv);
    csv_ = csv.file;
    if (csv.dropped > 0)
      std::fprintf(stderr, "note: %s ended in an unfinished row (%lld bytes), cut off\n", paths_.csv.c_str(),
                   static_cast<long long>(csv.dropped));
    if (csv.fresh) std::fprintf(csv_, "%s\n", kMetricsCsvHeader);
  }
}

MetricsLog::~MetricsLog() {
  if (csv_) std::fclose(csv_);
}

void MetricsLog::record(int64_t epoch, int64_t step,
                        const std::vector<std::pair<std::string, double>>& values) {
  const double t = unixTime();
  std::vector<Scalar> scalars;
  for (const auto& [tag, value] : values) {
    if (csv_)
      std::fprintf(csv_, "%lld,%lld,%s,%.8g,%.3f\n", static_cast<long long>(epoch + 1),
                   static_cast<long long>(step), tag.c_str(), value, t);
    scalars.push_back({tag, static_cast<float>(value)});
  }
  if (events_) events_->addScalars(step, scalars);
}

void MetricsLog::flush() {
  if (csv_ && std::fflush(csv_) != 0)
    throw IoError("cannot write " + paths_.csv + ": " + std::strerror(errno));
  if (events_) events_->flush();
  if (csv_monitor_) csv_monitor_->flush();
}

void MetricsLog::onStart(const RunStart& s) {
  if (s.config) train_batch_size_ = s.config->batch.train_batch_size;
}

void MetricsLog::onStep(const StepMetrics& m) {
  // DeepSpeed's monitors' events (engine.py): every step, at the samples seen so far, in the
  // DeepSpeed layout's CSV files and in the TensorBoard events beside lockstep's own tags.
  if (csv_monitor_ || events_) {
    const int64_t samples = m.step * train_batch_size_;
    std::vector<std::pair<const char*, double>> deepspeed{{"Train/Samples/train_loss", m.loss},
                                                          {"Train/Samples/lr", m.lr}};
    if (m.has_loss_scale) deepspeed.emplace_back("Train/Samples/loss_scale", m.loss_scale);
    std::vector<Scalar> scalars;
    for (const auto& [tag, value] : deepspeed) {
      if (csv_monitor_) csv_monitor_->write(tag, value, samples);
      scalars.push_back({tag, static_cast<float>(value)});
    }
    if (events_) events_->addScalars(samples, scalars);
  }
  ++steps_since_logged_;
  if (m.step % steps_per_print_ != 0) return;
  const double wait_ms =
      1000 * (m.data_wait_seconds - data_wait_logged_) / static_cast<double>(steps_since_logged_);
  steps_since_logged_ = 0;
  data_wait_logged_ = m.data_wait_seconds;
  std::vector<std::pair<std::string, double>> values{
      {"train/loss", m.loss},
      {"train/lr", m.lr},
      {"train/samples_per_sec", m.samples_per_sec},
      {"train/data_wait_ms", wait_ms},
      {"memory/max_rss_mib", static_cast<double>(peakRssBytes()) / (1 << 20)}};
  if (m.has_loss_scale) {
    values.emplace_back("train/loss_scale", m.loss_scale);
    values.emplace_back("train/skipped_steps", static_cast<double>(m.skipped_steps));
  }
  record(m.epoch, m.step, values);
  flush();
}

void MetricsLog::onEvaluation(const Evaluation& e) {
  record(e.epoch, e.step, {{"val/loss", e.loss}, {"val/accuracy", e.accuracy}});
  flush();
}

void MetricsLog::onEnd(const TrainSummary& s) {
  record(s.epochs - 1, s.steps, {{"test/loss", s.test_loss}, {"test/accuracy", s.test_accuracy}});
  flush();
}

}  // namespace lockstep::train
