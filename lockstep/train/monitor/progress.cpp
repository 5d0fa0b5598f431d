#include "lockstep/train/monitor/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace lockstep::train {

namespace {

int terminalWidth(int fd) {
  winsize ws{};
  if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

}  // namespace

ProgressLine::ProgressLine(const ProgressOptions& options) : options_(options) {
  last_draw_ = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  sender_ = launch::ProgressSender::fromEnvironment();
}

void ProgressLine::onStart(const RunStart& start) {
  const TrainConfig& c = *start.config;
  for (size_t r = 0; r < start.memory.size(); ++r) {
    const parallel::ModelStateBytes& m = start.memory[r];
    // A pipeline's rank r holds stage r / replicas (the data axis innermost).
    const std::string what =
        c.pipeline.enabled()
            ? "pipeline stage " +
                  std::to_string(
                      static_cast<int64_t>(r) /
                      std::max<int64_t>(1, static_cast<int64_t>(start.memory.size()) / c.pipeline.stages))
            : "ZeRO stage " + std::to_string(c.zero.stage);
    const std::string host =
        m.host_offload > 0 ? ", in host memory (offloaded) " + std::to_string(m.host_offload) + " B" : "";
    std::fprintf(stderr,
                 "memory: rank %zu: parameters %lld B, gradients %lld B, optimizer states %lld B%s (%s)\n", r,
                 static_cast<long long>(m.parameters), static_cast<long long>(m.gradients),
                 static_cast<long long>(m.optimizer_states), host.c_str(), what.c_str());
  }
}

void ProgressLine::onStep(const StepMetrics& m) {
  const auto now = std::chrono::steady_clock::now();
  // The shown rate is over the last rate_window_seconds (at least two points), not since start.
  window_.push_back({now, m.samples, m.data_wait_seconds});
  while (window_.size() > 2 &&
         std::chrono::duration<double>(now - window_[1].time).count() >= options_.rate_window_seconds) {
    window_.pop_front();
  }
  double rate = 0, eta = -1, data_share = 0;
  if (window_.size() >= 2) {
    const double dt = std::chrono::duration<double>(now - window_.front().time).count();
    const auto dsamples = static_cast<double>(m.samples - window_.front().samples);
    const auto dsteps = static_cast<double>(window_.size() - 1);
    if (dt > 0) {
      rate = dsamples / dt;
      eta = dt / dsteps * static_cast<double>(options_.total_steps - m.step);
      data_share = std::min(1.0, (m.data_wait_seconds - window_.front().data_wait_seconds) / dt);
    }
  }
  const bool print = m.step % options_.steps_per_print == 0;
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
    // A language model's tokens/s over the same window, and its MFU where the GPUs' peak is known.
    std::string tokens;
    const ModelThroughput& t = options_.throughput;
    if (t.tokens_per_sample > 0) {
      char buf[96];
      const double tokens_per_second = rate * static_cast<double>(t.tokens_per_sample);
      int n = std::snprintf(buf, sizeof buf, " tokens/s %.0f", tokens_per_second);
      if (t.flops_per_token > 0 && t.job_peak_flops > 0 && n > 0) {
        std::snprintf(buf + n, sizeof buf - static_cast<size_t>(n), " mfu %.1f%%",
                      100 * tokens_per_second * t.flops_per_token / t.job_peak_flops);
      }
      tokens = buf;
    }
    // data: the share of the same window the loop spent waiting for batches.
    std::fprintf(stderr,
                 "epoch %lld step %lld/%lld loss %.4f lr %.3g samples/s %.0f%s data %.0f%%%s eta %s\n",
                 static_cast<long long>(m.epoch + 1), static_cast<long long>(m.step),
                 static_cast<long long>(options_.total_steps), m.loss, m.lr, rate, tokens.c_str(),
                 100 * data_share, scale.c_str(), formatDuration(eta).c_str());
  }
}

// To the agent that owns the terminal when there is one, else redrawn on our own terminal.
void ProgressLine::show(const launch::ProgressReport& r) {
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

void ProgressLine::finishLine() {
  // The epoch's last step, which rate limiting may have skipped, is what stays on the screen.
  if ((sender_ || options_.tty) && !last_shown_ && last_.step > 0) show(last_);
  if (bar_open_) std::fputc('\n', stderr);
  bar_open_ = false;
}

void ProgressLine::onEvaluation(const Evaluation& e) {
  finishLine();
  // The step too: eval.every_steps validates several times an epoch.
  std::fprintf(stderr, "epoch %lld step %lld: val_loss=%.4f val_accuracy=%.4f\n",
               static_cast<long long>(e.epoch + 1), static_cast<long long>(e.step), e.loss, e.accuracy);
}

void ProgressLine::onEnd(const TrainSummary& s) {
  finishLine();
  if (!s.checkpoint_profile.is_null()) {
    const nlohmann::json& p = s.checkpoint_profile;
    std::fprintf(
        stderr,
        "activation checkpointing profile: %lld segment forwards %.2f s, %lld recomputations %.2f s, "
        "backward through them %.2f s\n",
        p["segments"].get<long long>(), p["forward_seconds"].get<double>(), p["recomputes"].get<long long>(),
        p["recompute_seconds"].get<double>(), p["backward_seconds"].get<double>());
  }
  if (!s.samples.is_null()) {
    const std::string prompt = s.samples["prompt"].get<std::string>();
    std::fprintf(stderr, "sample (greedy) after %s:\n%s\nsample (temperature %g, top-k %lld):\n%s\n",
                 prompt == "\n" ? "a newline" : prompt.c_str(),
                 s.samples["greedy"].get<std::string>().c_str(), s.samples["temperature"].get<double>(),
                 s.samples["top_k"].get<long long>(), s.samples["sampled"].get<std::string>().c_str());
  }
}

}  // namespace lockstep::train
