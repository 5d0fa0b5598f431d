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
  file_fd_ = ::open(options_.file_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
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
    partial_.push_back(data[i]);
    if (data[i] == '\n' || partial_.size() >= options_.max_line) {
      emitLine(partial_);
      partial_.clear();
    }
  }
}

void OutputSink::flush() {
  if (partial_.empty()) return;
  emitLine(partial_);
  partial_.clear();
}

void OutputSink::emitLine(const std::string& line) {
  // Whole lines only, so ranks sharing the console do not interleave mid-line. A line the program
  // already labelled with the same prefix (a script printing "[rank 1] ..." itself, as it must
  // under mpirun or srun) is not labelled twice.
  if (options_.console_fd >= 0) {
    const std::string& p = options_.console_prefix;
    writeConsole(options_.console_fd, line.compare(0, p.size(), p) == 0 ? line : p + line);
  }
  std::string stored = line;
  if (!stored.empty() && stored.back() == '\n') stored.pop_back();
  tail_.push_back(std::move(stored));
  while (tail_.size() > options_.tail_lines) tail_.pop_front();
}

std::string OutputSink::tail() const {
  std::deque<std::string> lines = tail_;
  if (!partial_.empty()) lines.push_back(partial_);
  while (lines.size() > options_.tail_lines) lines.pop_front();
  std::string out;
  for (const auto& l : lines) out += (out.empty() ? "" : "\n") + l;
  return out;
}

}  // namespace lockstep::launch
