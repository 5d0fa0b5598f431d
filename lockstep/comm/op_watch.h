#pragma once
// Which collective each worker is inside, and since when, shared with the agent that started it
// (lockstep run / lockstep train), so that the agent's watchdog can name a rank that is stuck
// inside a backend past the op's own timeout (a backend bug, a syscall that ignores the deadline)
// and end the job, instead of waiting forever (docs/launch.md, "Watchdog").
//
// The agent creates one table of slots (a memfd, one slot per local rank) and hands its descriptor
// to the workers in LOCKSTEP_OP_WATCH_FD; each worker writes its own slot at LOCAL_RANK. Without
// that variable (torchrun, mpirun, a process on its own) the worker side does nothing.
//   agent:   OpWatchTable table(local_world_size);  env["LOCKSTEP_OP_WATCH_FD"] = table.fd();
//            if (auto s = table.read(local_rank); s.busy()) ...
//   worker:  ProcessGroup runs every op body inside an OpWatchScope (process_group.cpp).
#include <chrono>
#include <cstdint>
#include <string>

namespace lockstep::comm {

struct OpContext;

inline constexpr const char* kOpWatchFdVariable = "LOCKSTEP_OP_WATCH_FD";

/// One worker's slot as the agent reads it.
struct OpWatchSnapshot {
  int64_t pid = 0;            ///< the worker that wrote it (0: none yet this attempt)
  int64_t busy_since_ns = 0;  ///< CLOCK_MONOTONIC ns when its outermost op in progress began; 0: idle
  int64_t timeout_ms = 0;     ///< that op's own timeout
  std::string op;             ///< "allreduce #7" (empty when idle)
  uint64_t ops_finished = 0;  ///< ops the worker has finished, for reports
  bool busy() const { return busy_since_ns != 0; }
  /// How long the op has run, at monotonic time now_ns.
  std::chrono::milliseconds busyFor(int64_t now_ns) const;
};

/// CLOCK_MONOTONIC in ns: the clock of busy_since_ns, the same in every process of a host.
int64_t monotonicNs();

/// The agent's side: a table of `slots` slots in shared memory. Not copyable.
class OpWatchTable {
 public:
  /// IoError naming what failed when the memfd cannot be made.
  explicit OpWatchTable(int slots);
  ~OpWatchTable();
  OpWatchTable(const OpWatchTable&) = delete;
  OpWatchTable& operator=(const OpWatchTable&) = delete;

  /// The descriptor workers inherit (not close-on-exec) and find in LOCKSTEP_OP_WATCH_FD.
  int fd() const { return fd_; }
  int slots() const { return slots_; }
  /// Clears every slot (before an attempt starts its workers).
  void reset();
  /// Slot `slot` now. Reads without locks: a slot torn by a concurrent write reads as idle or as a
  /// consistent op (the writer bumps a version around each change).
  OpWatchSnapshot read(int slot) const;

 private:
  int fd_ = -1;
  int slots_ = 0;
  void* base_ = nullptr;
};

/// The worker's side: marks the calling thread's op as in progress for its lifetime. Nested and
/// concurrent scopes (a hierarchical group's inner ops, two groups' worker threads) publish the
/// outermost, oldest one. Never throws; does nothing without LOCKSTEP_OP_WATCH_FD.
class OpWatchScope {
 public:
  explicit OpWatchScope(const OpContext& ctx);
  ~OpWatchScope();
  OpWatchScope(const OpWatchScope&) = delete;
  OpWatchScope& operator=(const OpWatchScope&) = delete;

 private:
  bool active_ = false;
  uint64_t id_ = 0;
};

}  // namespace lockstep::comm
