#pragma once
// The one progress line of a training job: what rank 0 reports (ProgressReport), how it travels
// from rank 0 to the agent that owns the terminal (a one-line text datagram, see
// progress_channel.h), and how it is drawn to fit a terminal of any width. Pure functions.
#include <cstdint>
#include <optional>
#include <string>

namespace lockstep::launch {

struct ProgressReport {
  int64_t epoch = 0;   ///< 1-based.
  int64_t epochs = 0;  ///< 0: unknown.
  int64_t step = 0;    ///< Optimizer steps so far.
  int64_t total_steps = 0;
  double loss = 0;
  double samples_per_sec = 0;  ///< Over a recent window, not since the start.
  double eta_seconds = -1;     ///< < 0: unknown.
};

/// "v1 epoch=2 epochs=5 step=..." (one line, no newline).
std::string encodeProgressReport(const ProgressReport& r);
/// nullopt when `text` is not an encoded report (another version, garbage).
std::optional<ProgressReport> decodeProgressReport(const std::string& text);

/// The line as drawn: "epoch 2/5 [=====>    ] step 1234/9375 loss 0.4321 5321 samples/s ETA 1m05s".
/// At most width - 1 characters, so a terminal never wraps it: the bar shrinks, then goes,
/// then the epoch goes, then the end is cut.
std::string formatProgressLine(const ProgressReport& r, int width);

/// "1h02m", "3m05s", "12s"; "?" when negative or absurd.
std::string formatDuration(double seconds);

}  // namespace lockstep::launch
