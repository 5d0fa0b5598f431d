#include "lockstep/comm/op_watch.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>
#include <set>
#include <tuple>

#include "lockstep/comm/process_group.h"
#include "lockstep/util/env.h"
#include "lockstep/util/error.h"

namespace lockstep::comm {

namespace {

// One worker's slot: 64 bytes, written by that worker only. version is odd while a write is under
// way, so a reader retries instead of combining two ops' fields. Lock-free atomics are address-free,
// hence safe between processes.
struct Slot {
  std::atomic<uint64_t> version;
  std::atomic<int64_t> pid;
  std::atomic<int64_t> busy_since_ns;
  std::atomic<int64_t> timeout_ms;
  std::atomic<uint64_t> op;  // OpType << 56 | seq
  std::atomic<uint64_t> ops_finished;
  uint64_t reserved[2];
};
static_assert(sizeof(Slot) == 64);
static_assert(std::atomic<int64_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free);

constexpr uint64_t kSeqMask = (uint64_t{1} << 56) - 1;

uint64_t encodeOp(const OpContext& ctx) {
  return (static_cast<uint64_t>(ctx.type) << 56) | (ctx.seq & kSeqMask);
}

std::string opName(uint64_t code) {
  const auto type = static_cast<OpType>(code >> 56);
  const uint64_t seq = code & kSeqMask;
  const bool p2p = type == OpType::send || type == OpType::recv;
  return ::lockstep::detail::concat(opTypeName(type), p2p ? " (p2p #" : " #", seq, p2p ? ")" : "");
}

// The worker's end: its slot, and the ops in progress on any of its threads (start, timeout, op,
// id), of which the oldest is published.
class WorkerSide {
 public:
  explicit WorkerSide(Slot* slot) : slot_(slot) {
    write([&] { slot_->pid.store(::getpid()); });
  }

  uint64_t begin(const OpContext& ctx) {
    std::lock_guard lock(mutex_);
    const uint64_t id = ++next_id_;
    active_.emplace(monotonicNs(), ctx.timeout.count(), encodeOp(ctx), id);
    publish();
    return id;
  }

  void end(uint64_t id) {
    std::lock_guard lock(mutex_);
    for (auto it = active_.begin(); it != active_.end(); ++it) {
      if (std::get<3>(*it) == id) {
        active_.erase(it);
        break;
      }
    }
    ++finished_;
    publish();
  }

 private:
  template <typename F>
  void write(F f) {
    slot_->version.fetch_add(1, std::memory_order_acq_rel);  // odd: being written
    f();
    slot_->version.fetch_add(1, std::memory_order_release);
  }
  void publish() {
    write([&] {
      if (active_.empty()) {
        slot_->busy_since_ns.store(0, std::memory_order_relaxed);
      } else {
        const auto& [since, timeout, op, id] = *active_.begin();
        slot_->busy_since_ns.store(since, std::memory_order_relaxed);
        slot_->timeout_ms.store(timeout, std::memory_order_relaxed);
        slot_->op.store(op, std::memory_order_relaxed);
      }
      slot_->ops_finished.store(finished_, std::memory_order_relaxed);
    });
  }

  Slot* slot_;
  std::mutex mutex_;
  std::set<std::tuple<int64_t, int64_t, uint64_t, uint64_t>> active_;  // ordered by start
  uint64_t next_id_ = 0;
  uint64_t finished_ = 0;
};

void warn(const std::string& why) {
  std::fprintf(stderr,
               "lockstep: %s=%s is not usable (%s); the agent's watchdog cannot see this rank's "
               "collectives\n",
               kOpWatchFdVariable, env::get(kOpWatchFdVariable).value_or("").c_str(), why.c_str());
}

// nullptr without LOCKSTEP_OP_WATCH_FD (not started by a lockstep agent); a warning, then nullptr,
// when it is set but unusable. Never throws: a watch must not stop training.
WorkerSide* attach() {
  try {
    const auto fd = env::getInt(kOpWatchFdVariable);
    if (!fd) return nullptr;
    const int64_t local_rank = env::getInt("LOCAL_RANK", 0);
    struct stat st {};
    if (*fd < 0 || ::fstat(static_cast<int>(*fd), &st) != 0) {
      warn(std::string("not an open descriptor: ") + std::strerror(errno));
      return nullptr;
    }
    const auto need = static_cast<off_t>((local_rank + 1) * static_cast<int64_t>(sizeof(Slot)));
    if (local_rank < 0 || st.st_size < need) {
      warn(
          ::lockstep::detail::concat("it holds ", st.st_size, " bytes, too few for LOCAL_RANK ", local_rank));
      return nullptr;
    }
    void* p = ::mmap(nullptr, static_cast<size_t>(need), PROT_READ | PROT_WRITE, MAP_SHARED,
                     static_cast<int>(*fd), 0);
    if (p == MAP_FAILED) {
      warn(std::string("mmap: ") + std::strerror(errno));
      return nullptr;
    }
    return new WorkerSide(static_cast<Slot*>(p) + local_rank);  // kept for the life of the process
  } catch (const std::exception& e) {
    warn(e.what());
    return nullptr;
  }
}

WorkerSide* workerSide() {
  static WorkerSide* side = attach();
  return side;
}

}  // namespace

int64_t monotonicNs() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

std::chrono::milliseconds OpWatchSnapshot::busyFor(int64_t now_ns) const {
  if (!busy()) return std::chrono::milliseconds(0);
  return std::chrono::milliseconds((now_ns - busy_since_ns) / 1000000);
}

OpWatchTable::OpWatchTable(int slots) : slots_(slots) {
  LOCKSTEP_ENFORCE(slots >= 1, ValueError, "an op watch table needs at least one slot, got ", slots);
  fd_ = ::memfd_create("lockstep-op-watch", 0);  // not MFD_CLOEXEC: the workers inherit it
  LOCKSTEP_ENFORCE(fd_ >= 0, IoError, "memfd_create for the watchdog's op table: ", std::strerror(errno));
  const size_t bytes = static_cast<size_t>(slots) * sizeof(Slot);
  if (::ftruncate(fd_, static_cast<off_t>(bytes)) != 0) {
    const int e = errno;
    ::close(fd_);
    throw IoError(std::string("sizing the watchdog's op table: ") + std::strerror(e));
  }
  base_ = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (base_ == MAP_FAILED) {
    const int e = errno;
    ::close(fd_);
    throw IoError(std::string("mapping the watchdog's op table: ") + std::strerror(e));
  }
}

OpWatchTable::~OpWatchTable() {
  ::munmap(base_, static_cast<size_t>(slots_) * sizeof(Slot));
  ::close(fd_);
}

void OpWatchTable::reset() { std::memset(base_, 0, static_cast<size_t>(slots_) * sizeof(Slot)); }

OpWatchSnapshot OpWatchTable::read(int slot) const {
  LOCKSTEP_ENFORCE(slot >= 0 && slot < slots_, ValueError, "op watch slot ", slot, " of ", slots_);
  const Slot& s = static_cast<const Slot*>(base_)[slot];
  for (int attempt = 0; attempt < 100; ++attempt) {
    const uint64_t v1 = s.version.load(std::memory_order_acquire);
    if (v1 & 1) continue;
    OpWatchSnapshot r;
    r.pid = s.pid.load(std::memory_order_relaxed);
    r.busy_since_ns = s.busy_since_ns.load(std::memory_order_relaxed);
    r.timeout_ms = s.timeout_ms.load(std::memory_order_relaxed);
    const uint64_t op = s.op.load(std::memory_order_relaxed);
    r.ops_finished = s.ops_finished.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s.version.load(std::memory_order_relaxed) != v1) continue;
    if (r.busy()) r.op = opName(op);
    return r;
  }
  return {};  // written to all the while: busy, but not stuck
}

OpWatchScope::OpWatchScope(const OpContext& ctx) {
  WorkerSide* side = workerSide();
  if (side == nullptr) return;
  active_ = true;
  id_ = side->begin(ctx);
}

OpWatchScope::~OpWatchScope() {
  if (active_) workerSide()->end(id_);
}

}  // namespace lockstep::comm
