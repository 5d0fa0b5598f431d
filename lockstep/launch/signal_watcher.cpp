#include "lockstep/launch/signal_watcher.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "lockstep/util/error.h"

namespace lockstep::launch {

namespace {

constexpr int kSignals[4] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP};
int g_pipe[2] = {-1, -1};
volatile sig_atomic_t g_termination = 0;

void onSignal(int sig) {
  int saved = errno;
  if (sig != SIGCHLD && g_termination == 0) g_termination = sig;
  char c = static_cast<char>(sig);
  ssize_t r = ::write(g_pipe[1], &c, 1);  // a full pipe already wakes the loop
  (void)r;
  errno = saved;
}

}  // namespace

SignalWatcher::SignalWatcher() {
  LOCKSTEP_CHECK(g_pipe[0] < 0, "only one SignalWatcher may exist at a time");
  LOCKSTEP_ENFORCE(::pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) == 0, IoError,
                   "cannot create the signal pipe: ", std::strerror(errno));
  g_termination = 0;
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  for (int i = 0; i < 4; ++i) {
    ::sigaction(kSignals[i], &sa, &old_[i]);
    // Started under nohup (SIGHUP ignored) or in the background of a script (SIGINT ignored):
    // keep ignoring them, as the user asked.
    if ((kSignals[i] == SIGHUP || kSignals[i] == SIGINT) && old_[i].sa_handler == SIG_IGN) {
      ::sigaction(kSignals[i], &old_[i], nullptr);
    }
  }
}

SignalWatcher::~SignalWatcher() {
  for (int i = 0; i < 4; ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
  ::close(g_pipe[0]);
  ::close(g_pipe[1]);
  g_pipe[0] = g_pipe[1] = -1;
}

int SignalWatcher::fd() const { return g_pipe[0]; }

int SignalWatcher::drain() {
  char buf[256];
  while (::read(g_pipe[0], buf, sizeof buf) > 0) {
  }
  return g_termination;
}

int SignalWatcher::terminationSignal() const { return g_termination; }

}  // namespace lockstep::launch
