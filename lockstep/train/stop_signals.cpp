#include "lockstep/train/stop_signals.h"

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <ctime>

#include "lockstep/util/error.h"

namespace lockstep::train {

namespace {

constexpr int kSignals[3] = {SIGTERM, SIGINT, SIGHUP};
std::atomic<int> g_received{0};  // several threads may take a signal at once: lock-free atomics
static_assert(std::atomic<int>::is_always_lock_free, "a signal handler writes it");
std::atomic<bool> g_installed{false};

std::atomic<int64_t> g_first_at_ms{0};  // CLOCK_MONOTONIC ms of the first signal (lock-free)
static_assert(std::atomic<int64_t>::is_always_lock_free, "a signal handler writes it");

// The first signal asks for a stop at the next step boundary. One more, 2 s or more later (not the
// same Ctrl-C reaching the process twice, from the terminal and from its launcher), ends the
// process at once: a rank blocked where no step boundary comes (a read of a file that never
// returns, a hung mount) must still be stoppable. Only async-signal-safe calls here.
void onSignal(int sig) {
  struct timespec now {};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  const int64_t now_ms = static_cast<int64_t>(now.tv_sec) * 1000 + now.tv_nsec / 1000000;
  // The first signal's time before its number: a second one seen at once in another thread (the
  // same Ctrl-C through the launcher) must find the time set, not 0.
  int64_t none = 0;
  if (g_first_at_ms.compare_exchange_strong(none, now_ms)) {
    g_received = sig;
    return;
  }
  if (now_ms - g_first_at_ms.load() < 2000) return;
  static const char kMessage[] =
      "lockstep: a second stop signal: exiting now, without the checkpoint the first one asked for\n";
  ssize_t ignored = ::write(2, kMessage, sizeof(kMessage) - 1);
  (void)ignored;
  ::_exit(128 + sig);
}

}  // namespace

StopSignals::StopSignals() {
  LOCKSTEP_CHECK(!g_installed.exchange(true), "only one StopSignals may exist at a time");
  g_received = 0;
  g_first_at_ms = 0;
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigemptyset(&sa.sa_mask);
  for (const int s : kSignals) sigaddset(&sa.sa_mask, s);  // one handler at a time in a thread
  // Blocking calls (a collective's socket read, a file write) resume: the step finishes as usual.
  sa.sa_flags = SA_RESTART;
  for (int i = 0; i < 3; ++i) {
    ::sigaction(kSignals[i], &sa, &old_[i]);
    if (old_[i].sa_handler == SIG_IGN) ::sigaction(kSignals[i], &old_[i], nullptr);
  }
}

StopSignals::~StopSignals() {
  for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
  g_installed = false;
}

int StopSignals::received() const { return g_received; }

}  // namespace lockstep::train
