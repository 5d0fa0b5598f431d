#pragma once
// The control plane of the shm backend: every rank's segment starts with a ShmHeader through
// which ranks post what op they run, arrive at barriers, and publish liveness. Internal.
//
// Barriers: rank r arrives at its k-th barrier by storing step = k in its header, then waits
// until every peer's step >= k: a short busy spin, then yields, then futex sleeps on one shared
// word (in rank 0's header) in 20 ms slices; between slices it checks peers' pids (a dead peer
// fails the op within ~20 ms), peers' abort flags, and the op's deadline.
#include <atomic>
#include <chrono>
#include <cstdint>
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

struct alignas(64) ShmHeader {
  static constexpr uint64_t kMagic = 0x6c6f636b73746570ull;  // "lockstep"
  std::atomic<uint64_t> step{0};
  alignas(64) std::atomic<uint32_t> event{0};  // futex word (used in rank 0's header)
  std::atomic<uint32_t> sleepers{0};
  alignas(64) uint64_t magic = 0;
  int32_t pid = 0;
  std::atomic<uint32_t> aborted{0};
  OpDesc desc[2];  // by seq parity: a peer may post op seq+1 before this rank read op seq
};

/// Barrier and op-slot checks over the mapped headers of all ranks. Used by one thread at a time
/// (the group's worker).
class ShmPeers {
 public:
  ShmPeers(int rank, std::vector<ShmHeader*> headers);
  /// Posts this rank's descriptor of the op in ctx.
  void post(const OpContext& ctx, const OpDesc& desc);
  /// After the op's first barrier: PeerError naming both ops when a peer's differs.
  void checkDescs(const OpContext& ctx);
  /// Arrive and wait for every peer; PeerError (dead/aborted peer) or TimeoutError naming the
  /// op and the ranks that did not arrive.
  void barrier(const OpContext& ctx);
  /// Marks this rank as failed so peers stop waiting for it at once.
  void abort();

 private:
  void wakeAll();
  bool allArrived(uint64_t target) const;
  std::vector<int> missing(uint64_t target) const;
  [[noreturn]] void fail(const OpContext& ctx, uint64_t target, bool timed_out);
  void checkLiveness(const OpContext& ctx, uint64_t target);

  int rank_;
  std::vector<ShmHeader*> headers_;
  uint64_t step_ = 0;
  bool many_threads_;  // more ranks than cores: yield instead of spinning
};

/// "allreduce(count 10, f32, sum)" for messages.
std::string describe(const OpDesc& d);

}  // namespace lockstep::comm::shm
