#include "lockstep/launch/signal_watcher.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "lockstep/util/error.h"

namespace lockstep::launch {

namespace {

constexpr int kSignals[4] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP};
int g_pipe[2] = {-1, -1};
volatile sig_atomic_t g_termination = 0;
// Pids in the order their SIGCHLD arrived. Signals do not queue, so children that exit while a
// SIGCHLD is pending are missing; the first one to exit is always there.
constexpr int kMaxExits = 1 << 14;
volatile sig_atomic_t g_exit_pids[kMaxExits];
std::atomic<int> g_exit_count{0};
static_assert(std::atomic<int>::is_always_lock_free);

void onSignal(int sig, siginfo_t* info, void*) {
  int saved = errno;
  if (sig != SIGCHLD && g_termination == 0) g_termination = sig;
  if (sig == SIGCHLD && info != nullptr) {
    int i = g_exit_count.fetch_add(1);
    if (i < kMaxExits) g_exit_pids[i] = info->si_pid;
  }
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
  sa.sa_sigaction = onSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP | SA_SIGINFO;
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

uint64_t SignalWatcher::exitOrder(pid_t pid) const {
  int n = std::min(g_exit_count.load(), kMaxExits);
  for (int i = 0; i < n; ++i)
    if (g_exit_pids[i] == pid) return static_cast<uint64_t>(i);
  return UINT64_MAX;
}

}  // namespace lockstep::launch
