#include "lockstep/launch/output_sink.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "lockstep/launch/console.h"
#include "lockstep/util/error.h"

namespace lockstep::launch {

namespace {

void writeAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;  // a closed console must not take the agent down
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

void makeDirs(const std::string& dir) {
  if (dir.empty()) return;
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    std::string part = dir.substr(0, pos);
    if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) {
      throw IoError("cannot create directory '" + part + "': " + std::strerror(errno));
    }
  }
}

OutputSink::OutputSink(const OutputSinkOptions& options) : options_(options) {
  if (options_.file_path.empty()) return;
  auto slash = options_.file_path.rfind('/');
  if (slash != std::string::npos && slash > 0) makeDirs(options_.file_path.substr(0, slash));
  // Truncated: a launch with the same --log-dir and run id writes the attempt's logs afresh.
  file_fd_ = ::open(options_.file_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  LOCKSTEP_ENFORCE(file_fd_ >= 0, IoError, "cannot open log file '", options_.file_path,
                   "': ", std::strerror(errno), "; check --log-dir");
}

OutputSink::~OutputSink() {
  flush();
  if (file_fd_ >= 0) ::close(file_fd_);
}

void OutputSink::write(const char* data, size_t n) {
  if (file_fd_ >= 0) writeAll(file_fd_, data, n);
  for (size_t i = 0; i < n; ++i) {
    // A carriage return not followed by a newline ends a segment too: a progress bar (tqdm)
    // redraws its line with "\r" and would otherwise show only when it is done. Whether a newline
    // follows may be known only at the next read.
    if (pending_cr_ && data[i] != '\n') emitLine(false);
    pending_cr_ = false;
    partial_.push_back(data[i]);
    if (data[i] == '\r')
      pending_cr_ = true;
    else if (data[i] == '\n' || partial_.size() >= options_.max_line)
      emitLine(false);
  }
  // The text of a line being redrawn (tqdm writes "\r" and then the bar) reaches the console now,
  // not at the next "\r".
  if (after_redraw_ && !pending_cr_ && partial_.size() > console_sent_) emitLine(true);
}

void OutputSink::flush() {
  pending_cr_ = false;
  if (partial_.empty()) return;
  emitLine(false);
}

void OutputSink::emitLine(bool so_far) {
  // Whole lines only, so ranks sharing the console do not interleave mid-line (but for a line
  // redrawn with "\r", sent as it grows). A line the program already labelled with the same
  // prefix (a script printing "[rank 1] ..." itself, as it must under mpirun or srun) is not
  // labelled twice.
  // A line longer than max_line goes out in pieces: the prefix only before the first.
  const std::string& line = partial_;
  if (options_.console_fd >= 0) {
    const std::string& p = options_.console_prefix;
    if (console_sent_ > 0)
      writeConsole(options_.console_fd, line.substr(console_sent_));
    else if (continues_line_ || line == "\r" || line.compare(0, p.size(), p) == 0)
      writeConsole(options_.console_fd, line);
    else
      writeConsole(options_.console_fd, p + line);
  }
  if (so_far) {
    console_sent_ = line.size();
    return;
  }
  console_sent_ = 0;
  continues_line_ = !line.empty() && line.back() != '\n' && line.back() != '\r';
  std::string stored = line;
  const bool redraw = !stored.empty() && stored.back() == '\r';
  while (!stored.empty() && (stored.back() == '\n' || stored.back() == '\r')) stored.pop_back();
  // The segments of a line redrawn with "\r" are one line of the tail: its last state.
  if (after_redraw_ && !tail_.empty())
    tail_.back() = std::move(stored);
  else
    tail_.push_back(std::move(stored));
  after_redraw_ = redraw;
  while (tail_.size() > options_.tail_lines) tail_.pop_front();
  partial_.clear();
}

std::string OutputSink::tail() const {
  std::deque<std::string> lines = tail_;
  if (!partial_.empty()) {
    std::string last = partial_;
    while (!last.empty() && last.back() == '\r') last.pop_back();
    if (after_redraw_ && !lines.empty())
      lines.back() = std::move(last);  // the line being redrawn
    else
      lines.push_back(std::move(last));
  }
  while (lines.size() > options_.tail_lines) lines.pop_front();
  std::string out;
  for (const auto& l : lines) out += (out.empty() ? "" : "\n") + l;
  return out;
}

}  // namespace lockstep::launch
