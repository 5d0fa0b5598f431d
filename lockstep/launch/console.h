#pragma once
// The agent's terminal while a progress line is shown: workers' output lines go above the
// progress line (which is cleared, the lines written, the line redrawn), so the terminal shows
// one updating line, never a scroll of them. Thread-safe: the agent's loop writes workers' lines,
// the progress channel's thread updates the line.
#include <mutex>
#include <optional>
#include <string>

#include "lockstep/launch/progress_line.h"

namespace lockstep::launch {

class Console {
 public:
  /// fd: the terminal the progress line is drawn on (the agent's stderr).
  explicit Console(int fd);
  ~Console();
  Console(const Console&) = delete;
  Console& operator=(const Console&) = delete;

  /// The console drawing a progress line in this process, or nullptr (then output goes straight
  /// to its fd). Set by the constructor, cleared by the destructor.
  static Console* active();

  /// Writes whole lines to fd (the terminal or another fd sharing it) above the progress line.
  void writeLines(int fd, const std::string& lines);
  /// Replaces the progress line and draws it, fitted to the terminal's current width. The last
  /// step's line stays on the screen, with what follows below it.
  void setProgress(const ProgressReport& r);
  /// Leaves the last progress line on the screen and moves below it; the next setProgress starts
  /// a new line.
  void finish();

  /// Columns of the terminal (TIOCGWINSZ, else $COLUMNS, else 80).
  int width() const;

 private:
  void drawLocked();

  int fd_;
  std::mutex mu_;
  std::optional<ProgressReport> report_;
  bool shown_ = false;
};

/// Writes `text` (whole lines) to fd through the active Console when there is one, else directly.
void writeConsole(int fd, const std::string& text);

}  // namespace lockstep::launch
