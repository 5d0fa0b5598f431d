#pragma once
// Process group for ranks on one host that exchange data through POSIX shared memory: no
// sockets on the data path. Each rank owns one segment: a ShmHeader and a ring of num_slots
// staging slots of block_bytes. allreduce runs as a pipeline over blocks: every rank stages the
// chunks of a block that other ranks own; once all staged it, each rank reduces the chunk it owns
// (all ranks work on disjoint chunks) and publishes the result in its slot; once all reduced it,
// each rank copies the others' results: a reduce-scatter then an allgather. The ring keeps the
// working set in cache and lets a rank run num_slots blocks ahead of a descheduled peer.
// reduce_scatter is that pipeline's first half alone: every rank stages the pieces its peers own
// and reduces its own piece into its output, so each input byte crosses shared memory once.
// Other collectives stage their blocks the same way. After the ring, the segment holds one
// point-to-point channel per peer (shm_point_to_point.h, ShmOptions::p2p_slots).
#include <memory>
#include <string>
#include <vector>

#include "lockstep/comm/process_group.h"
#include "lockstep/comm/shm/shm_peers.h"
#include "lockstep/comm/shm/shm_point_to_point.h"
#include "lockstep/comm/shm/shm_segment.h"
#include "lockstep/comm/store/store.h"

namespace lockstep::comm {

struct ShmOptions {
  size_t block_bytes = 1 << 20;        // staging slot size; env LOCKSTEP_SHM_BLOCK_BYTES
  size_t num_slots = 8;                // staging slots per rank (>= 2); env LOCKSTEP_SHM_SLOTS
  size_t stream_min_bytes = 16 << 20;  // allreduce results this large are written with
                                       // non-temporal stores; env LOCKSTEP_SHM_STREAM_MIN_BYTES
  /// How long a rank waiting for its peers polls before it sleeps on a futex, when there are no
  /// more ranks than cores (else it yields). Ranks of a data-parallel job arrive within a step's
  /// jitter of each other; a futex wake-up costs tens of microseconds on a VM, paid by the late
  /// rank too, which waits for the sleeper's share of the work. env LOCKSTEP_SHM_SPIN_US.
  std::chrono::microseconds spin{2000};
  /// Point to point: each ordered pair of ranks has a channel of p2p_slots chunks of
  /// p2p_slot_bytes (a 64-byte chunk header + payload) in the sender's segment. A send returns
  /// once its last chunk is in the channel (a message that fits is buffered, like MPI's eager
  /// sends); larger ones advance as the receiver drains the channel.
  size_t p2p_slot_bytes = 64 << 10;
  size_t p2p_slots = 4;
  std::chrono::milliseconds timeout = kDefaultCollectiveTimeout;  // default op timeout
};

/// Thread-safety: see ProcessGroup. send/recv: a recv matches the oldest unreceived send from
/// that rank with the same tag (messages with other tags that arrive first are buffered). They
/// are posted in issue order with the collectives but complete beside them, each as soon as its
/// channel lets it: a recv waiting for its data holds no later op back.
class ShmProcessGroup : public ProcessGroup {
 public:
  /// Collective over all size ranks: creates this rank's segment and maps the others', meeting
  /// through store (keys "shm/..."; give each group its own PrefixStore). Waits up to
  /// options.timeout for the peers to arrive (group_arrival.h: TimeoutError naming the missing ranks).
  ShmProcessGroup(std::shared_ptr<Store> store, int rank, int size, const ShmOptions& options = {});
  ~ShmProcessGroup() override;

  std::string backendName() const override { return "shm"; }
  LOCKSTEP_PROCESS_GROUP_OPS_OVERRIDE
  std::shared_ptr<ProcessGroup> newGroup(const std::vector<int>& ranks) override;

 private:
  // Op bodies, run on the worker thread.
  void runAllreduce(const OpContext& ctx, uint8_t* data, size_t count, DType dtype, ReduceOp op);
  // Each rank stages the pieces of its input that its peers own and reduces its own piece of out
  // from every peer's slot: (n-1)/n of the input crosses shared memory once, half an allreduce.
  void runReduceScatter(const OpContext& ctx, const uint8_t* in, uint8_t* out, size_t count, DType dtype,
                        ReduceOp op);
  // Runs max(nblocks, 1) blocks through stage -> (all staged) -> middle -> (all reduced) ->
  // final, each step as soon as its inputs are ready; has_final = false skips the last wait.
  template <typename Stage, typename Middle, typename Final>
  void pipeline(const OpContext& ctx, size_t nblocks, Stage stage, Middle middle, Final final,
                bool has_final);
  // Generic staged exchange: in round k, rank j stages bytes [k*B, (k+1)*B) of src[j] (when
  // src[j] is set on rank j); then sink(j, offset, ptr, n) consumes every staged piece.
  template <typename Sink>
  void runRounds(const OpContext& ctx, const uint8_t* my_src, const std::vector<size_t>& src_bytes,
                 Sink sink);
  uint8_t* slot(int rank, uint64_t block) const;
  shm::OpDesc desc(const OpContext& ctx, DType dtype, size_t count, int root = -1,
                   ReduceOp op = ReduceOp::sum, uint64_t extra = 0) const;
  void fail();
  // send / recv: posted through the queue, the transfer advancing beside it.
  std::shared_ptr<Work> postP2P(OpType type, uint8_t* data, size_t count, DType dtype, int peer, int tag,
                                std::chrono::milliseconds timeout);

  std::shared_ptr<Store> store_;
  ShmOptions options_;
  std::vector<shm::ShmSegment> segments_;
  std::unique_ptr<shm::ShmPeers> peers_;
  uint64_t block_ = 0;  // global block counter (across ops): block g uses slot g % num_slots
  std::shared_ptr<shm::ShmPointToPoint> p2p_;  // send/recv, in the segments after the ring
  int groups_created_ = 0;
};

}  // namespace lockstep::comm
