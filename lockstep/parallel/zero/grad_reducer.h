#pragma once
// ZeRO stage 2's gradient path (DeepSpeed's reduce-scatter of the "ipg" buckets): as backward makes
// a bucket's last gradient ready, the bucket's gradients are copied into a staging buffer laid out
// as `world` blocks (zero/partition.h), the parameters' own gradients are freed, and a
// reduce-scatter (average) is launched that leaves each rank its piece of the bucket. A bucket
// that is one parameter split evenly is reduced from its gradient itself, with no copy. Launches go
// in bucket order on every rank, and two slots alternate so that one bucket's communication
// overlaps the next bucket's gradients (DeepSpeed's overlap_comm: one bucket filling, one
// reducing). Each rank accumulates its pieces over the backward passes of an accumulation window,
// so gradient memory is the partition (1/world of the parameters) plus two buckets, not the whole
// model; no staging memory is held between backward passes. Pieces and buffers live where the
// parameters do (the host or one GPU: copies and collectives then on the current stream), except
// that ZeRO-Offload keeps a GPU run's pieces in host memory (host_pieces, as DeepSpeed's CPU
// offload accumulates the gradient partition there): each reduced block is copied down into a
// host buffer (pinned with pin_memory), on a side stream beside the compute (the backward's next
// kernels do not wait for it), and added on the host once the copy is done, when the
// buffer is needed again or backward ends, so the GPU holds two buckets in flight and no gradient
// partition, and the host never waits for more than that copy.
//
// Not thread-safe; runs on the thread that runs backward. Every backward is collective.
#include <memory>
#include <string>
#include <vector>

#include "lockstep/autograd/variable.h"
#include "lockstep/comm/process_group.h"
#include "lockstep/parallel/tensor_comm.h"
#include "lockstep/parallel/zero/partition.h"
#include "lockstep/parallel/zero/piece_swap.h"

namespace lockstep::parallel {

class ZeroGradReducer {
 public:
  /// Registers gradient-ready hooks on params (all of one floating dtype). group may be null on a
  /// world of one rank (the pieces are then the whole gradients).
  /// overlap: leave each bucket's reduction running while backward goes on (else wait at once);
  /// reduce_scatter: reduce-scatter the bucket (else allreduce it and keep this rank's piece).
  /// swap_dir: keep the pieces in a swap file there (ZeRO-Infinity's gradient swapping): each is
  /// read, added to and written back as its bucket's reduction completes; IoError naming swap_key
  /// when the file cannot be made.
  /// host_pieces: the pieces in host memory while the parameters are on a GPU (pinned receive
  /// buffers with pin_memory); nothing changes for host parameters.
  ZeroGradReducer(std::vector<autograd::Variable> params, std::vector<std::string> names,
                  const ZeroLayout& layout, std::shared_ptr<comm::ProcessGroup> group, bool overlap = true,
                  bool reduce_scatter = true, const std::string& swap_dir = {},
                  const std::string& swap_key = {}, bool host_pieces = false, bool pin_memory = false);
  ~ZeroGradReducer();
  ZeroGradReducer(const ZeroGradReducer&) = delete;
  ZeroGradReducer& operator=(const ZeroGradReducer&) = delete;

  /// This rank's averaged gradient piece of bucket b, summed over the backward passes since zero().
  Tensor& piece(size_t b) { return pieces_[b]; }
  /// Whether the pieces are host memory while the parameters are on a GPU (host_pieces).
  bool piecesOnHost() const { return piece_device_ != device_; }
  /// Throws a ValueError naming the parameters that got no gradient when the last backward did not
  /// reduce every bucket (a parameter unused in forward).
  void checkComplete() const;
  /// Zero-fills the pieces: a new accumulation window.
  void zero();
  /// Bytes of the gradient pieces this rank keeps (not counting the two staging buffers); with a
  /// swap file, those in memory now.
  size_t pieceBytes() const;
  /// Piece b in memory (with its sums) until the matching releasePiece(); without a swap file both
  /// do nothing. changed: write it back.
  void acquirePiece(size_t b);
  void releasePiece(size_t b, bool changed);
  const ZeroPieceSwap* pieceSwap() const { return swap_.get(); }
  /// Waits for every launched reduction but the latest and adds it to its piece, freeing its
  /// gradient or staging buffer. Stage 3 calls it before each unit's backward, so that the unit's
  /// gradients are made beside one bucket in flight, not two.
  void completeAllButLatest();

 private:
  struct Slot {
    Tensor staging;         // the bucket as world blocks: a copy, or its one parameter's gradient
    Tensor recv;            // this rank's block (host_pieces: each launch's own)
    Tensor host_recv;       // host_pieces: the block copied down to the host
    CopyFence copied;       // host_pieces: that copy, queued; its sum into the piece comes later
    long host_bucket = -1;  // the bucket host_recv holds, not yet added (-1: none)
    std::shared_ptr<comm::Work> work;
    long bucket = -1;
  };
  void onGradReady(size_t param);
  void launch(size_t bucket);
  void complete(Slot& slot);
  /// host_pieces: adds the block host_recv holds into its piece once its copy is done.
  void addHostBlock(Slot& slot);
  std::string missing() const;

  std::vector<autograd::Variable> params_;
  std::vector<std::string> names_;
  ZeroLayout layout_;
  std::shared_ptr<comm::ProcessGroup> group_;
  int rank_ = 0;
  bool overlap_ = true;
  bool reduce_scatter_ = true;
  std::vector<size_t> bucket_of_;  // parameter -> bucket
  std::vector<size_t> pending_;    // per bucket: gradients not ready yet in this backward
  std::vector<bool> ready_;
  size_t ready_count_ = 0;
  size_t next_launch_ = 0;
  std::vector<Tensor> pieces_;
  std::unique_ptr<ZeroPieceSwap> swap_;
  Slot slots_[2];
  int64_t max_chunk_ = 0;
  DType dtype_ = DType::f32;
  Device device_;        // the parameters' and the buffers' (host memory or one GPU)
  Device piece_device_;  // the pieces': device_, or the host (host_pieces)
  bool pin_memory_ = false;
  std::vector<size_t> hook_ids_;
};

}  // namespace lockstep::parallel
