// StopSignals: the first SIGTERM / SIGINT / SIGHUP is a request to stop at the next step boundary;
// one more, 2 s or more later, ends the process at once (a rank blocked where no step boundary
// comes, waiting on a data file whose read never returns). Signals are per process: each case runs
// in a child.
#include "lockstep/train/stop_signals.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

namespace lockstep::train {
namespace {

// Runs body in a child whose stderr goes to a pipe; its exit code (128 + N for signal N) and stderr.
std::pair<int, std::string> inChild(void (*body)()) {
  int fds[2];
  if (::pipe(fds) != 0) return {-1, "pipe failed"};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    ::dup2(fds[1], 2);
    body();
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string err;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) err.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), err};
}

TEST(StopSignals, the_first_signal_is_recorded_and_a_late_second_one_ends_the_process) {
  auto [code, err] = inChild([] {
    StopSignals stop;
    ::raise(SIGTERM);
    if (stop.received() != SIGTERM) ::_exit(10);
    ::raise(SIGINT);  // the same stop, reaching the process twice: within 2 s, counted once
    if (stop.received() != SIGTERM) ::_exit(11);
    std::this_thread::sleep_for(std::chrono::milliseconds(2100));
    ::raise(SIGTERM);  // "still stuck": ends it now
    std::this_thread::sleep_for(std::chrono::seconds(5));
    ::_exit(12);
  });
  EXPECT_EQ(code, 143) << err;
  EXPECT_NE(err.find("a second stop signal: exiting now"), std::string::npos) << err;
}

TEST(StopSignals, without_a_signal_nothing_is_received) {
  auto [code, err] = inChild([] {
    StopSignals stop;
    if (stop.received() != 0) ::_exit(10);
  });
  EXPECT_EQ(code, 0) << err;
}

}  // namespace
}  // namespace lockstep::train
