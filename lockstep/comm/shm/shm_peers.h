#pragma once
// The control plane of the shm backend: every rank's segment starts with a ShmHeader through
// which ranks post what op they run, publish how far they got, and show they are alive. Internal.
//
// Progress is three monotonic block counters per rank (staged, reduced, done), counted across
// ops, so a rank can run ahead of a descheduled peer by as many blocks as it has staging slots
// instead of meeting it at a barrier for every block. Waiting: a short busy spin, then yields,
// then futex sleeps on one shared word (in rank 0's header) in 20 ms slices; between slices it
// checks peers' pids (a dead peer fails the op within ~20 ms), peers' abort flags and the
// op's deadline.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lockstep/comm/process_group.h"

namespace lockstep::comm::shm {

/// What a rank runs in an op slot; peers compare it to their own.
struct OpDesc {
  uint64_t seq = 0;
  uint64_t count = 0;
  uint64_t extra = 0;  // e.g. a hash of allgatherv counts
  int32_t root = -1;
  uint8_t type = 0;
  uint8_t dtype = 0;
  uint8_t op = 0;
};

enum Counter : int { kStaged = 0, kReduced = 1, kDone = 2 };

struct alignas(64) ShmHeader {
  static constexpr uint64_t kMagic = 0x6c6f636b73746570ull;  // "lockstep"
  struct alignas(64) Line {
    std::atomic<uint64_t> value{0};
  };
  Line counters[3];                            // blocks staged / reduced / done, counted across ops
  alignas(64) std::atomic<uint32_t> event{0};  // futex word (used in rank 0's header)
  std::atomic<uint32_t> sleepers{0};
  alignas(64) uint64_t magic = 0;
  int32_t pid = 0;
  std::atomic<uint32_t> aborted{0};
  OpDesc desc[2];  // by seq parity: a peer may post op seq+1 before this rank read op seq
};

/// Synchronisation over the mapped headers of all ranks. The collectives' calls come from one
/// thread at a time; waitForPeer, checkPeer, wake and the sleeps from any thread.
class ShmPeers {
 public:
  ShmPeers(int rank, std::vector<ShmHeader*> headers, std::chrono::microseconds spin);
  /// Posts this rank's descriptor of the op in ctx.
  void post(const OpContext& ctx, const OpDesc& desc);
  /// Once every peer staged the op's first block: PeerError naming both ops when one differs.
  void checkDescs(const OpContext& ctx);
  /// Publishes this rank's counter c = v and wakes sleepers.
  void publish(Counter c, uint64_t v);
  /// True when every rank's counter c is >= v.
  bool allAtLeast(Counter c, uint64_t v) const;
  /// Blocks until ready() holds. first_block is the op's first global block: ranks whose staged
  /// counter is below it "did not arrive". PeerError (dead/aborted peer) or TimeoutError.
  void waitUntil(const OpContext& ctx, uint64_t first_block, const std::function<bool()>& ready);
  /// Point to point: blocks until ready() holds, waiting on rank `peer` only. `waiting_for`
  /// says what for, in failure messages ("rank 1 to receive (tag 7)"). PeerError when the peer
  /// died or aborted, TimeoutError at the op's deadline. It does not spin: a transfer may be
  /// waited for beside its rank's compute (the point-to-point thread), and polling would take
  /// that compute's core (with one core a rank, 1F1B over shm idled 0.27 of the schedule
  /// spinning, 0.145 sleeping); where the waiter is the thread that needs the data, polling
  /// gained nothing measurable either (gpt-mini's 2-stage 1F1B, 3 runs each way).
  void waitForPeer(const OpContext& ctx, int peer, const std::string& waiting_for,
                   const std::function<bool()>& ready);
  /// PeerError when rank `peer` died or aborted, TimeoutError when ctx's deadline passed, each
  /// naming the op and what it waits for (`waiting_for`, as waitForPeer).
  void checkPeer(const OpContext& ctx, int peer, const std::string& waiting_for) const;
  /// For a thread that waits for any change (the point-to-point progress thread): sleepBegin()
  /// registers it as a sleeper and returns the event count; after checking its condition it calls
  /// sleepEnd(count, slice), which returns once a rank woke sleepers since (or after slice).
  uint32_t sleepBegin();
  void sleepEnd(uint32_t count, std::chrono::milliseconds slice);
  /// Wakes ranks sleeping in a wait (after a store they may be waiting for).
  void wake();
  /// Marks this rank as failed so peers stop waiting for it at once.
  void abort();

 private:
  [[noreturn]] void fail(const OpContext& ctx, uint64_t first_block, bool timed_out);
  void checkLiveness(const OpContext& ctx, uint64_t first_block);
  // Spin (unless told not to), yield, then futex sleep until ready(); check() runs every 20 ms
  // while asleep (throws).
  void waitLoop(const std::function<bool()>& ready, const std::function<void()>& check, bool spin = true);

  int rank_;
  std::vector<ShmHeader*> headers_;
  bool many_threads_;  // more ranks than cores: yield instead of spinning
  std::chrono::microseconds spin_;
};

/// "allreduce #3 (count 10, f32, sum)" for messages.
std::string describe(const OpDesc& d);

}  // namespace lockstep::comm::shm
