#include "lockstep/comm/shm/shm_peers.h"

#include <linux/futex.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <thread>

#include "lockstep/util/error.h"

namespace lockstep::comm::shm {

namespace {

void futexWait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::milliseconds slice) {
  timespec ts{};
  ts.tv_sec = slice.count() / 1000;
  ts.tv_nsec = (slice.count() % 1000) * 1000000;
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futexWakeAll(std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// True when pid is gone or a zombie (a dead child not yet reaped still answers kill(pid, 0)).
bool processDead(int pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string content;
  if (!std::getline(stat, content)) return false;
  auto close = content.rfind(')');
  if (close == std::string::npos || close + 2 >= content.size()) return false;
  char state = content[close + 2];
  return state == 'Z' || state == 'X';
}

std::string rankList(const std::vector<int>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

}  // namespace

std::string describe(const OpDesc& d) {
  std::string s = ::lockstep::detail::concat(opTypeName(static_cast<OpType>(d.type)), " #", d.seq, " (count ",
                                             d.count, ", ", dtypeName(static_cast<DType>(d.dtype)));
  auto t = static_cast<OpType>(d.type);
  if (t == OpType::allreduce || t == OpType::reduce || t == OpType::reduceScatter) {
    s += std::string(", ") + reduceOpName(static_cast<ReduceOp>(d.op));
  }
  if (d.root >= 0) s += ", root " + std::to_string(d.root);
  return s + ")";
}

ShmPeers::ShmPeers(int rank, std::vector<ShmHeader*> headers, std::chrono::microseconds spin)
    : rank_(rank), headers_(std::move(headers)), spin_(spin) {
  many_threads_ = headers_.size() > std::max(1u, std::thread::hardware_concurrency());
}

void ShmPeers::post(const OpContext& ctx, const OpDesc& desc) { headers_[rank_]->desc[ctx.seq & 1] = desc; }

void ShmPeers::checkDescs(const OpContext& ctx) {
  const OpDesc& mine = headers_[rank_]->desc[ctx.seq & 1];
  for (size_t j = 0; j < headers_.size(); ++j) {
    const OpDesc& d = headers_[j]->desc[ctx.seq & 1];
    bool same = d.seq == mine.seq && d.type == mine.type && d.dtype == mine.dtype && d.count == mine.count &&
                d.extra == mine.extra && d.root == mine.root && d.op == mine.op;
    if (!same) {
      throw PeerError(::lockstep::detail::concat(
          ctx.name, ": ranks issued different collectives in the same slot: rank ", rank_, " issued ",
          describe(mine), " but rank ", j, " issued ", describe(d),
          "; every rank must issue the same collectives in the same order"));
    }
  }
}

bool ShmPeers::allAtLeast(Counter c, uint64_t v) const {
  for (const auto* h : headers_) {
    if (h->counters[c].value.load(std::memory_order_acquire) < v) return false;
  }
  return true;
}

void ShmPeers::publish(Counter c, uint64_t v) {
  headers_[rank_]->counters[c].value.store(v, std::memory_order_seq_cst);
  wake();
}

void ShmPeers::abort() {
  headers_[rank_]->aborted.store(1, std::memory_order_seq_cst);
  headers_[0]->event.fetch_add(1, std::memory_order_seq_cst);
  futexWakeAll(&headers_[0]->event);
}

void ShmPeers::fail(const OpContext& ctx, uint64_t first_block, bool timed_out) {
  // Ranks that never staged this op's first block did not arrive; if all arrived, name the
  // ranks that are furthest behind.
  std::vector<int> late;
  for (size_t j = 0; j < headers_.size(); ++j) {
    if (headers_[j]->counters[kStaged].value.load() <= first_block) late.push_back(static_cast<int>(j));
  }
  std::string what = "did not arrive";
  if (late.empty()) {
    // The furthest behind of the others (one snapshot of their counters, which may still move):
    // this rank is waiting for them, not stalled itself.
    std::vector<uint64_t> done(headers_.size());
    for (size_t j = 0; j < headers_.size(); ++j) done[j] = headers_[j]->counters[kDone].value.load();
    uint64_t least = UINT64_MAX;
    for (size_t j = 0; j < headers_.size(); ++j)
      if (static_cast<int>(j) != rank_) least = std::min(least, done[j]);
    for (size_t j = 0; j < headers_.size(); ++j)
      if (static_cast<int>(j) != rank_ && done[j] == least) late.push_back(static_cast<int>(j));
    what = "arrived but stalled mid-op";
  }
  if (timed_out) {
    throw TimeoutError(::lockstep::detail::concat(ctx.name, " timed out after ", ctx.timeout.count(),
                                                  " ms on rank ", rank_, ": ranks ", rankList(late), " ",
                                                  what, " (stuck, or they issued fewer collectives)"));
  }
  std::vector<int> dead, aborted;
  for (size_t j = 0; j < headers_.size(); ++j) {
    if (static_cast<int>(j) == rank_) continue;
    if (headers_[j]->aborted.load())
      aborted.push_back(static_cast<int>(j));
    else if (processDead(headers_[j]->pid))
      dead.push_back(static_cast<int>(j));
  }
  throw PeerError(::lockstep::detail::concat(
      ctx.name, " failed on rank ", rank_, ": ranks ", rankList(late), " ", what,
      dead.empty() ? "" : "; ranks " + rankList(dead) + " died",
      aborted.empty() ? "" : "; ranks " + rankList(aborted) + " failed an op and aborted"));
}

void ShmPeers::checkLiveness(const OpContext& ctx, uint64_t first_block) {
  for (size_t j = 0; j < headers_.size(); ++j) {
    if (static_cast<int>(j) == rank_) continue;
    const ShmHeader* h = headers_[j];
    if (h->aborted.load(std::memory_order_acquire) || processDead(h->pid)) fail(ctx, first_block, false);
  }
  if (std::chrono::steady_clock::now() >= ctx.deadline) fail(ctx, first_block, true);
}

void ShmPeers::waitUntil(const OpContext& ctx, uint64_t first_block, const std::function<bool()>& ready) {
  waitLoop(ready, [&] { checkLiveness(ctx, first_block); });
}

void ShmPeers::waitForPeer(const OpContext& ctx, int peer, const std::string& waiting_for,
                           const std::function<bool()>& ready) {
  waitLoop(
      ready, [&] { checkPeer(ctx, peer, waiting_for); }, /*spin=*/false);
}

void ShmPeers::checkPeer(const OpContext& ctx, int peer, const std::string& waiting_for) const {
  const ShmHeader* h = headers_[peer];
  std::string why;
  if (h->aborted.load(std::memory_order_acquire))
    why = "rank " + std::to_string(peer) + " failed an op and aborted";
  else if (processDead(h->pid))
    why = "rank " + std::to_string(peer) + " died";
  if (!why.empty()) {
    throw PeerError(::lockstep::detail::concat(ctx.name, " failed on rank ", rank_, " waiting for ",
                                               waiting_for, ": ", why));
  }
  if (std::chrono::steady_clock::now() >= ctx.deadline) {
    throw TimeoutError(::lockstep::detail::concat(ctx.name, " timed out after ", ctx.timeout.count(),
                                                  " ms on rank ", rank_, " waiting for ", waiting_for,
                                                  " (does it post the matching op?)"));
  }
}

uint32_t ShmPeers::sleepBegin() {
  ShmHeader* g = headers_[0];
  g->sleepers.fetch_add(1, std::memory_order_seq_cst);
  return g->event.load(std::memory_order_seq_cst);
}

void ShmPeers::sleepEnd(uint32_t count, std::chrono::milliseconds slice) {
  ShmHeader* g = headers_[0];
  if (slice.count() > 0) futexWait(&g->event, count, slice);
  g->sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

void ShmPeers::wake() {
  ShmHeader* g = headers_[0];
  if (g->sleepers.load(std::memory_order_seq_cst) > 0) {
    g->event.fetch_add(1, std::memory_order_seq_cst);
    futexWakeAll(&g->event);
  }
}

void ShmPeers::waitLoop(const std::function<bool()>& ready, const std::function<void()>& check, bool spin) {
  if (ready()) return;
  if (spin && !many_threads_) {
    // Poll, yielding now and then so a thread of this process (a data loader) can still run here.
    const auto spin_until = std::chrono::steady_clock::now() + spin_;
    for (int round = 1;; ++round) {
      for (int i = 0; i < 64; ++i) {
        cpuRelax();
        if (ready()) return;
      }
      if (round % 32 == 0) {
        if (std::chrono::steady_clock::now() >= spin_until) break;
        std::this_thread::yield();
      }
    }
  }
  for (int i = 0; i < 10; ++i) {
    std::this_thread::yield();
    if (ready()) return;
  }
  ShmHeader* g = headers_[0];
  auto next_check = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
  while (true) {
    auto now = std::chrono::steady_clock::now();
    if (now >= next_check) {
      check();
      next_check = now + std::chrono::milliseconds(20);
    }
    g->sleepers.fetch_add(1, std::memory_order_seq_cst);
    uint32_t ev = g->event.load(std::memory_order_seq_cst);
    if (ready()) {
      g->sleepers.fetch_sub(1);
      return;
    }
    futexWait(&g->event, ev, std::chrono::milliseconds(20));
    g->sleepers.fetch_sub(1);
    if (ready()) return;
  }
}

}  // namespace lockstep::comm::shm
