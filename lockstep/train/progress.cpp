#include "lockstep/train/progress.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "lockstep/util/error.h"

namespace lockstep::train {

std::string formatDuration(double s) {
  if (!(s >= 0) || s > 1e8) return "?";
  auto t = static_cast<int64_t>(s + 0.5);
  char buf[32];
  if (t >= 3600) {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(t / 3600),
                  static_cast<long long>(t / 60 % 60));
  } else if (t >= 60) {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(t / 60),
                  static_cast<long long>(t % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(t));
  }
  return buf;
}

Progress::Progress(const ProgressOptions& options) : options_(options) {
  start_ = last_draw_ = std::chrono::steady_clock::now();
  if (!options_.tensorboard_dir.empty()) events_ = std::make_unique<EventWriter>(options_.tensorboard_dir);
  if (!options_.csv_path.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(options_.csv_path).parent_path(), ec);
    // Appended to, so a resumed job keeps the rows of the runs before it (those past the
    // checkpoint it resumes from appear twice, as in TensorBoard's event files).
    const bool fresh = std::filesystem::file_size(options_.csv_path, ec) == 0 || ec;
    csv_ = std::fopen(options_.csv_path.c_str(), "a");
    if (!csv_) throw IoError("cannot write " + options_.csv_path + ": " + std::strerror(errno));
    if (fresh) std::fprintf(csv_, "epoch,step,metric,value\n");
  }
}

Progress::~Progress() {
  if (csv_) std::fclose(csv_);
}

void Progress::writeCsv(int64_t epoch, int64_t step, const std::string& name, double value) {
  if (csv_)
    std::fprintf(csv_, "%lld,%lld,%s,%.8g\n", static_cast<long long>(epoch + 1), static_cast<long long>(step),
                 name.c_str(), value);
}

void Progress::onStep(const StepMetrics& m) {
  auto now = std::chrono::steady_clock::now();
  if (first_step_ < 0) first_step_ = m.step - 1, start_ = now;
  const bool print = m.step % options_.steps_per_print == 0;
  if (print) {
    writeCsv(m.epoch, m.step, "train/loss", m.loss);
    writeCsv(m.epoch, m.step, "train/lr", m.lr);
    writeCsv(m.epoch, m.step, "train/samples_per_sec", m.samples_per_sec);
    if (m.has_loss_scale) {
      writeCsv(m.epoch, m.step, "train/loss_scale", m.loss_scale);
      writeCsv(m.epoch, m.step, "train/skipped_steps", static_cast<double>(m.skipped_steps));
    }
    if (events_) {
      std::vector<Scalar> scalars{
          {"train/loss", static_cast<float>(m.loss)},
          {"train/lr", static_cast<float>(m.lr)},
          {"train/samples_per_sec", static_cast<float>(m.samples_per_sec)}};
      if (m.has_loss_scale) {
        scalars.push_back({"train/loss_scale", static_cast<float>(m.loss_scale)});
        scalars.push_back({"train/skipped_steps", static_cast<float>(m.skipped_steps)});
      }
      events_->addScalars(m.step, scalars);
    }
  }
  double elapsed = std::chrono::duration<double>(now - start_).count();
  int64_t done = m.step - first_step_;
  double eta = done > 0
                   ? elapsed / static_cast<double>(done) * static_cast<double>(options_.total_steps - m.step)
                   : -1;
  if (options_.tty) {
    if (std::chrono::duration<double>(now - last_draw_).count() < 0.1 && m.step != options_.total_steps)
      return;
    last_draw_ = now;
    const int width = 24;
    int filled = options_.total_steps > 0 ? static_cast<int>(width * m.step / options_.total_steps) : 0;
    std::string bar(static_cast<size_t>(filled), '=');
    bar.resize(width, ' ');
    std::fprintf(stderr, "\r\033[Kepoch %lld/%lld [%s] step %lld/%lld loss %.4f %.0f samples/s ETA %s",
                 static_cast<long long>(m.epoch + 1), static_cast<long long>(options_.epochs), bar.c_str(),
                 static_cast<long long>(m.step), static_cast<long long>(options_.total_steps), m.loss,
                 m.samples_per_sec, formatDuration(eta).c_str());
    bar_open_ = true;
  } else if (print) {
    std::string scale;
    if (m.has_loss_scale) {
      char buf[96];
      std::snprintf(buf, sizeof buf, " loss_scale %.6g skipped %lld", m.loss_scale,
                    static_cast<long long>(m.skipped_steps));
      scale = buf;
    }
    std::fprintf(stderr, "epoch %lld step %lld/%lld loss %.4f lr %.3g samples/s %.0f%s eta %s\n",
                 static_cast<long long>(m.epoch + 1), static_cast<long long>(m.step),
                 static_cast<long long>(options_.total_steps), m.loss, m.lr, m.samples_per_sec, scale.c_str(),
                 formatDuration(eta).c_str());
  }
}

void Progress::finishLine() {
  if (bar_open_) std::fputc('\n', stderr);
  bar_open_ = false;
}

void Progress::onValidation(int64_t epoch, int64_t step, double loss, double accuracy) {
  finishLine();
  std::fprintf(stderr, "epoch %lld: val_loss=%.4f val_accuracy=%.4f\n", static_cast<long long>(epoch + 1),
               loss, accuracy);
  writeCsv(epoch, step, "val/loss", loss);
  writeCsv(epoch, step, "val/accuracy", accuracy);
  if (csv_) std::fflush(csv_);
  if (events_) {
    events_->addScalars(
        step, {{"val/loss", static_cast<float>(loss)}, {"val/accuracy", static_cast<float>(accuracy)}});
    events_->flush();
  }
}

}  // namespace lockstep::train
