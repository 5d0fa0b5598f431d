#include "lockstep/train/stop_signals.h"

#include <atomic>

#include "lockstep/util/error.h"

namespace lockstep::train {

namespace {

constexpr int kSignals[3] = {SIGTERM, SIGINT, SIGHUP};
volatile sig_atomic_t g_received = 0;
std::atomic<bool> g_installed{false};

void onSignal(int sig) {
  if (g_received == 0) g_received = sig;
}

}  // namespace

StopSignals::StopSignals() {
  LOCKSTEP_CHECK(!g_installed.exchange(true), "only one StopSignals may exist at a time");
  g_received = 0;
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigemptyset(&sa.sa_mask);
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
