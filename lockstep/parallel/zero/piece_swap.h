#pragma once
// ZeRO-Infinity's NVMe offload of the partition itself: this rank's pieces of the parameters
// (offload_param device nvme, stage 3) and of the reduced gradients (with offload_optimizer device
// nvme at stage 3, as DeepSpeed swaps the gradient partition out too) live in a swap file, and
// each piece is in memory only while something uses it: its all-gather, its gradient's
// accumulation, the optimizer's step over it, a checkpoint.
//
// The tensors are the pieces themselves (one storage each): acquire() gives the piece's Storage
// fresh memory (Storage::materialize) and reads its bytes back, release() writes them out when
// they changed and frees the memory (Storage::release), so every view of a piece (the optimizer's
// shard variables) stays valid and sees the values again after the next acquire(). Acquires nest
// (a count per piece). A piece known to be all zeros (setZero(), or created so) is not read: it is
// zero-filled.
//
// The file is a file::SwapFile (io_uring, O_DIRECT where the file system allows it); the pieces'
// memory is not aligned for O_DIRECT, so the bytes go through two aligned bounce buffers, one
// being copied while the other is read or written.
//
// Not thread-safe. Nothing here is collective.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/tensor/tensor.h"
#include "lockstep/util/swap_file.h"

namespace lockstep::parallel {

class ZeroPieceSwap {
 public:
  /// Creates the swap file under dir (IoError naming `key` and dir when it cannot), writes each
  /// tensor's current contents (none when `zeros`: they are all zeros) and frees them. Each tensor
  /// must be contiguous and own its whole storage.
  ZeroPieceSwap(std::vector<Tensor> pieces, const std::string& dir, const std::string& prefix,
                const std::string& key, bool zeros = false);
  ~ZeroPieceSwap();
  ZeroPieceSwap(const ZeroPieceSwap&) = delete;
  ZeroPieceSwap& operator=(const ZeroPieceSwap&) = delete;

  /// Piece i in memory with its last contents until the matching release(); contents false: its
  /// memory only (uninitialised unless already in memory), for a caller that writes all of it.
  void acquire(size_t i, bool contents = true);
  /// Ends one acquire(); the last one writes the piece out when `changed` was said by any of
  /// them, and frees its memory.
  void release(size_t i, bool changed);
  /// Every piece holds zeros from now on (those in memory are zero-filled; nothing is written).
  void setZero();
  size_t size() const { return entries_.size(); }
  /// Bytes of the pieces in memory now.
  int64_t residentBytes() const;
  /// Bytes of all the pieces (what the file holds for them).
  int64_t totalBytes() const;
  const file::SwapFile& file() const { return *file_; }

 private:
  struct Entry {
    Tensor t;
    int64_t offset = 0;  // in the file
    int pins = 0;
    bool zero = false;
    bool changed = false;
  };
  void readBack(Entry& e);
  void writeOut(Entry& e);

  std::vector<Entry> entries_;
  std::unique_ptr<file::SwapFile> file_;
  std::unique_ptr<char, void (*)(void*)> bounce_{nullptr, nullptr};
  size_t bounce_bytes_ = 0;  // each of the two
};

}  // namespace lockstep::parallel
