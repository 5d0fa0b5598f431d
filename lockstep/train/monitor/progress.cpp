#include "lockstep/train/monitor/progress.h"

#include <sys/ioctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "lockstep/util/error.h"

namespace lockstep::train {

namespace {

double unixTime() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

int terminalWidth(int fd) {
  winsize ws{};
  if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

// Peak resident memory of this process (rank 0), in MiB.
double maxRssMiB() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

}  // namespace

Progress::Progress(const ProgressOptions& options) : options_(options) {
  last_draw_ = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  sender_ = launch::ProgressSender::fromEnvironment();
  if (!options_.tensorboard_dir.empty()) events_ = std::make_unique<EventWriter>(options_.tensorboard_dir);
  if (!options_.csv_path.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(options_.csv_path).parent_path(), ec);
    // Appended to, so a resumed job keeps the rows of the runs before it (those past the
    // checkpoint it resumes from appear twice, as in TensorBoard's event files).
    const bool fresh = std::filesystem::file_size(options_.csv_path, ec) == 0 || ec;
    csv_ = std::fopen(options_.csv_path.c_str(), "a");
    if (!csv_) throw IoError("cannot write " + options_.csv_path + ": " + std::strerror(errno));
    if (fresh) std::fprintf(csv_, "%s\n", kMetricsCsvHeader);
  }
}

Progress::~Progress() {
  if (csv_) std::fclose(csv_);
}

void Progress::record(int64_t epoch, int64_t step,
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

void Progress::flush() {
  if (csv_ && std::fflush(csv_) != 0)
    throw IoError("cannot write " + options_.csv_path + ": " + std::strerror(errno));
  if (events_) events_->flush();
}

void Progress::onStep(const StepMetrics& m) {
  const auto now = std::chrono::steady_clock::now();
  // The shown rate is over the last rate_window_seconds (at least two points), not since start.
  window_.emplace_back(now, m.samples);
  while (window_.size() > 2 &&
         std::chrono::duration<double>(now - window_[1].first).count() >= options_.rate_window_seconds) {
    window_.pop_front();
  }
  double rate = 0, eta = -1;
  if (window_.size() >= 2) {
    const double dt = std::chrono::duration<double>(now - window_.front().first).count();
    const auto dsamples = static_cast<double>(m.samples - window_.front().second);
    const auto dsteps = static_cast<double>(window_.size() - 1);
    if (dt > 0) {
      rate = dsamples / dt;
      eta = dt / dsteps * static_cast<double>(options_.total_steps - m.step);
    }
  }
  const bool print = m.step % options_.steps_per_print == 0;
  if (print) {
    std::vector<std::pair<std::string, double>> values{{"train/loss", m.loss},
                                                       {"train/lr", m.lr},
                                                       {"train/samples_per_sec", m.samples_per_sec},
                                                       {"memory/max_rss_mib", maxRssMiB()}};
    if (m.has_loss_scale) {
      values.emplace_back("train/loss_scale", m.loss_scale);
      values.emplace_back("train/skipped_steps", static_cast<double>(m.skipped_steps));
    }
    record(m.epoch, m.step, values);
    flush();
  }
  last_ = {m.epoch + 1, options_.epochs, m.step, options_.total_steps, m.loss, rate, eta};
  last_shown_ = false;
  const bool last = m.step == options_.total_steps;
  const bool due = std::chrono::duration<double>(now - last_draw_).count() >= 0.1 || last;
  if (sender_ || options_.tty) {
    if (due || (sender_ && print)) show(last_);
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
                 static_cast<long long>(options_.total_steps), m.loss, m.lr, rate, scale.c_str(),
                 formatDuration(eta).c_str());
  }
}

// To the agent that owns the terminal when there is one, else redrawn on our own terminal.
void Progress::show(const launch::ProgressReport& r) {
  last_draw_ = std::chrono::steady_clock::now();
  last_shown_ = true;
  if (sender_) {
    sender_->send(r);
    return;
  }
  std::string line = "\r\033[K" + launch::formatProgressLine(r, terminalWidth(STDERR_FILENO));
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
  bar_open_ = true;
}

void Progress::finishLine() {
  // The epoch's last step, which rate limiting may have skipped, is what stays on the screen.
  if ((sender_ || options_.tty) && !last_shown_ && last_.step > 0) show(last_);
  if (bar_open_) std::fputc('\n', stderr);
  bar_open_ = false;
}

void Progress::onValidation(int64_t epoch, int64_t step, double loss, double accuracy) {
  finishLine();
  std::fprintf(stderr, "epoch %lld: val_loss=%.4f val_accuracy=%.4f\n", static_cast<long long>(epoch + 1),
               loss, accuracy);
  record(epoch, step, {{"val/loss", loss}, {"val/accuracy", accuracy}});
  flush();
}

void Progress::onTest(int64_t epoch, int64_t step, double loss, double accuracy) {
  record(epoch, step, {{"test/loss", loss}, {"test/accuracy", accuracy}});
  flush();
}

}  // namespace lockstep::train
