#include "lockstep/launch/console.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>

namespace lockstep::launch {

namespace {

std::atomic<Console*> g_active{nullptr};

void writeAll(int fd, const std::string& s) {
  const char* p = s.data();
  size_t n = s.size();
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;  // a closed terminal must not take the agent down
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

constexpr const char* kClearLine = "\r\033[K";

}  // namespace

Console::Console(int fd) : fd_(fd) { g_active.store(this); }

Console::~Console() {
  finish();
  Console* self = this;
  g_active.compare_exchange_strong(self, nullptr);
}

Console* Console::active() { return g_active.load(); }

int Console::width() const {
  winsize ws{};
  if (::ioctl(fd_, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  if (const char* c = std::getenv("COLUMNS")) {
    int n = std::atoi(c);
    if (n > 0) return n;
  }
  return 80;
}

void Console::drawLocked() {
  if (!report_) return;
  writeAll(fd_, kClearLine + formatProgressLine(*report_, width()));
  shown_ = true;
}

void Console::writeLines(int fd, const std::string& lines) {
  std::lock_guard<std::mutex> lock(mu_);
  if (shown_) writeAll(fd_, kClearLine);
  writeAll(fd, lines);
  if (!lines.empty() && lines.back() != '\n') writeAll(fd, "\n");  // a cut line must not carry the bar
  shown_ = false;
  drawLocked();
}

void Console::setProgress(const ProgressReport& r) {
  std::lock_guard<std::mutex> lock(mu_);
  report_ = r;
  drawLocked();
  if (r.total_steps > 0 && r.step >= r.total_steps) {  // done: the line stays, output goes below it
    writeAll(fd_, "\n");
    shown_ = false;
    report_.reset();
  }
}

void Console::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (shown_) writeAll(fd_, "\n");
  shown_ = false;
  report_.reset();
}

void writeConsole(int fd, const std::string& text) {
  if (Console* c = Console::active()) {
    c->writeLines(fd, text);
  } else {
    writeAll(fd, text);
  }
}

}  // namespace lockstep::launch
