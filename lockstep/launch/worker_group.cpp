#include "lockstep/launch/worker_group.h"

#include <poll.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <set>

#include "lockstep/launch/orphan_reaper.h"

namespace lockstep::launch {

namespace {

double nowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

WorkerGroup::~WorkerGroup() { stop(SIGKILL, std::chrono::milliseconds(0), -1); }

void WorkerGroup::start(std::vector<WorkerSpec> specs) {
  specs_ = std::move(specs);
  workers_.clear();
  stopped_ = false;
  try {
    for (const auto& s : specs_) workers_.push_back(std::make_unique<WorkerProcess>(s.process));
  } catch (...) {
    stop(SIGKILL, std::chrono::milliseconds(0), -1);
    throw;
  }
  reported_.assign(workers_.size(), false);
  exit_time_.assign(workers_.size(), 0);
}

void WorkerGroup::waitForEvents(int wake_fd, std::chrono::milliseconds timeout) {
  std::vector<pollfd> fds;
  if (wake_fd >= 0) fds.push_back({wake_fd, POLLIN, 0});
  for (const auto& w : workers_)
    for (int fd : {w->stdoutFd(), w->stderrFd()})
      if (fd >= 0) fds.push_back({fd, POLLIN, 0});
  int n = ::poll(fds.data(), fds.size(), static_cast<int>(timeout.count()));
  if (n <= 0) return;
  for (const auto& p : fds) {
    if (p.revents == 0 || p.fd == wake_fd) continue;
    for (auto& w : workers_) w->drain(p.fd);
  }
}

std::vector<size_t> WorkerGroup::reap(const std::function<uint64_t(pid_t)>& exit_order) {
  std::vector<size_t> failed;
  std::set<pid_t> keep;
  for (size_t i = 0; i < workers_.size(); ++i) {
    auto& w = *workers_[i];
    if (!w.exited()) {
      if (!w.poll()) {
        keep.insert(w.pid());
        continue;
      }
    }
    if (!reported_[i]) {
      reported_[i] = true;
      exit_time_[i] = nowSeconds();
      w.drainAll();
      if (w.failed()) failed.push_back(i);
    }
  }
  reapStrays(keep);
  if (exit_order) {
    std::stable_sort(failed.begin(), failed.end(), [&](size_t a, size_t b) {
      return exit_order(workers_[a]->pid()) < exit_order(workers_[b]->pid());
    });
  }
  return failed;
}

std::optional<size_t> WorkerGroup::firstErrorFileWriter(
    const std::function<bool(const std::string&)>& secondary) const {
  std::optional<size_t> best;
  struct timespec best_time {};
  for (size_t i = 0; i < workers_.size(); ++i) {
    const auto& w = *workers_[i];
    if (specs_[i].error_file.empty() || (w.exited() && !w.failed())) continue;
    struct stat st {};
    if (::stat(specs_[i].error_file.c_str(), &st) != 0 || st.st_size == 0) continue;
    if (secondary && secondary(readErrorFile(specs_[i].error_file))) continue;
    if (!best || st.st_mtim.tv_sec < best_time.tv_sec ||
        (st.st_mtim.tv_sec == best_time.tv_sec && st.st_mtim.tv_nsec < best_time.tv_nsec)) {
      best = i;
      best_time = st.st_mtim;
    }
  }
  return best;
}

bool WorkerGroup::allSucceeded() const {
  for (const auto& w : workers_)
    if (!w->exited() || w->failed()) return false;
  return true;
}

void WorkerGroup::stop(int sig, std::chrono::milliseconds grace, int wake_fd) {
  if (workers_.empty() || stopped_) return;
  stopped_ = true;
  // Every group is signalled, even of workers that exited: their descendants may live on.
  for (auto& w : workers_) w->signalGroup(sig);
  // A stopped worker (SIGSTOP, Ctrl-Z) would hold `sig` pending for the whole grace period.
  for (auto& w : workers_) w->signalGroup(SIGCONT);
  auto deadline = std::chrono::steady_clock::now() + grace;
  for (;;) {
    reap();
    bool running = false;
    for (const auto& w : workers_) running = running || !w->exited();
    if (!running || std::chrono::steady_clock::now() >= deadline) break;
    waitForEvents(wake_fd, std::chrono::milliseconds(10));
    if (wake_fd >= 0) {
      char buf[64];
      while (::read(wake_fd, buf, sizeof buf) > 0) {
      }
    }
  }
  for (auto& w : workers_) w->signalGroup(SIGKILL);
  for (auto& w : workers_) {
    while (!w->poll()) ::usleep(1000);
    w->closePipes();
  }
  killStrays({});
}

WorkerFailure WorkerGroup::failureOf(size_t i, int group_rank, const std::string& host) const {
  const auto& w = *workers_[i];
  WorkerFailure f;
  f.rank = specs_[i].rank;
  f.local_rank = specs_[i].local_rank;
  f.group_rank = group_rank;
  f.host = host;
  f.pid = w.pid();
  f.still_running = !w.exited();
  f.exit_code = w.exitCode();
  f.signal = w.termSignal();
  f.time_s = exit_time_[i];
  f.stderr_tail = w.stderrTail();
  f.error_file = specs_[i].error_file;
  f.error_content = readErrorFile(f.error_file);
  return f;
}

}  // namespace lockstep::launch
