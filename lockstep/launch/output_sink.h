#pragma once
// Where one stream (stdout or stderr) of one worker goes: the console, a log file, and always a
// small in-memory tail for the failure report. Not thread-safe: the agent's loop owns it.
#include <cstddef>
#include <deque>
#include <string>

namespace lockstep::launch {

struct OutputSinkOptions {
  int console_fd = -1;         ///< Forward complete lines here; -1: do not.
  std::string console_prefix;  ///< Put before each line forwarded to the console ("[rank 1] ")
                               ///< that does not start with it already.
  std::string file_path;       ///< Append everything here; empty: no file.
  size_t tail_lines = 20;      ///< Lines kept for the failure report.
  size_t max_line = 4096;      ///< Longer lines are split.
};

class OutputSink {
 public:
  /// Opens the log file (creating its directory); IoError naming it when that fails.
  explicit OutputSink(const OutputSinkOptions& options);
  ~OutputSink();
  OutputSink(const OutputSink&) = delete;
  OutputSink& operator=(const OutputSink&) = delete;

  /// Feeds bytes read from the worker's pipe.
  void write(const char* data, size_t n);
  /// Emits a pending partial line (at EOF or when the worker is gone).
  void flush();
  /// The last lines written, joined with '\n'.
  std::string tail() const;

 private:
  /// partial_ to the console (what of it was not sent yet) and, unless so_far, to the tail as a
  /// line, then cleared.
  void emitLine(bool so_far);

  OutputSinkOptions options_;
  int file_fd_ = -1;
  std::string partial_;
  std::deque<std::string> tail_;
  bool after_redraw_ = false;    ///< The last segment ended in "\r": the next one redraws its line.
  bool pending_cr_ = false;      ///< partial_ ends in "\r": a redraw unless a "\n" comes next.
  size_t console_sent_ = 0;      ///< Of partial_, what the console has already (a redrawn line).
  bool continues_line_ = false;  ///< The last piece ended at max_line, mid-line: no prefix next.
};

/// Creates dir and its parents (mkdir -p); IoError naming it on failure.
void makeDirs(const std::string& dir);

}  // namespace lockstep::launch
