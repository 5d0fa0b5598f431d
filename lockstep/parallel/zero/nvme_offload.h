#pragma once
// ZeRO-Infinity's NVMe offload of the optimizer states (DeepSpeed's offload_optimizer.device: nvme):
// the states of this rank's partition (Adam's exp_avg and exp_avg_sq, SGD's momentum_buffer) live
// in a swap file under nvme_path between steps, and step() streams them through a few swap buffers
// one sub-group at a time. A sub-group is sub_group_size consecutive elements of the partition
// (the last one shorter); each state tensor of a sub-group takes one swap buffer, so the
// buffer_count buffers hold buffer_count / (states per element) sub-groups at once:
//   pipeline_read:  sub-group k+1's states are read while sub-group k steps (needs 2 in memory);
//   pipeline_write: sub-group k's states are written back while later ones step (the last ones
//                   while the next forward and backward run); with 3 in memory nothing waits.
// Without them each sub-group is read, stepped and written in turn (DeepSpeed's defaults).
//
// DeepSpeed groups whole parameter partitions until a group reaches sub_group_size; here the cut
// is at exactly sub_group_size elements, so memory is bounded by buffer_count * sub_group_size
// whatever the parameters' sizes. The result is bitwise that of stepping without offload: the
// optimizers' updates are per element, and each piece keeps its own step count.
//
// The optimizer steps a sub-group through its own groups, narrowed for the call to the pieces of
// that sub-group (Variables viewing the shards: the optimizer's state is keyed by them), with the
// state buffers put into its state (optim::Optimizer::state) as views of a swap buffer before the
// step and taken out after. The first step creates the states (the optimizer's own first-step
// rules, e.g. SGD's momentum starting at the gradient).
//
// Not thread-safe. Nothing here is collective.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/optim/optimizer.h"
#include "lockstep/util/swap_file.h"

namespace lockstep::parallel {

/// DeepSpeed's offload_optimizer keys for device nvme (and zero_optimization.sub_group_size).
struct NvmeOffloadOptions {
  /// The directory of the swap files; empty: no NVMe offload.
  std::string nvme_path;
  /// Elements per sub-group (DeepSpeed's default 1e9).
  int64_t sub_group_size = 1'000'000'000;
  /// Swap buffers of sub_group_size elements each; at least the optimizer's states per element.
  int64_t buffer_count = 4;
  bool pipeline_read = false;
  bool pipeline_write = false;
};

/// ValueError naming the key. Pure.
void validateNvmeOffloadOptions(const NvmeOffloadOptions& options);

class ZeroNvmeOffload {
 public:
  /// One of the ZeRO optimizer's shards: its variable (in the optimizer's group `group`), and its
  /// index in the optimizer's state dict numbering.
  struct Shard {
    autograd::Variable var;
    size_t group = 0;
    int64_t opt_index = 0;
  };

  /// Creates the swap file (IoError naming nvme_path when it cannot: missing, unwritable, full)
  /// sized for the shards' states. ValueError when buffer_count is below the optimizer's states
  /// per element. `rank` names the file. The optimizer must not hold state yet.
  ZeroNvmeOffload(std::shared_ptr<optim::Optimizer> optimizer, std::vector<Shard> shards, DType dtype,
                  int rank, const NvmeOffloadOptions& options);
  ~ZeroNvmeOffload();
  ZeroNvmeOffload(const ZeroNvmeOffload&) = delete;
  ZeroNvmeOffload& operator=(const ZeroNvmeOffload&) = delete;

  /// One optimizer step of every shard (their gradients set as the optimizer's step expects).
  void step();
  /// Called around the steps of each shard (its index in the constructor's list): `before` ahead of
  /// the sub-group holding its first elements, `after` once the sub-group holding its last ones has
  /// stepped. ZeRO's swapped parameter and gradient pieces come into memory there.
  void setShardHooks(std::function<void(size_t)> before, std::function<void(size_t)> after);
  /// The optimizer's state dict over the shards as the optimizer would hold it without offload
  /// (keys "<opt_index>.<name>"), read from the swap file: the whole partition's states in memory.
  optim::OptimizerStateDict stateDict();
  /// Loads a state dict in stateDict()'s numbering into the swap file (and the groups'
  /// hyper-parameters). ValueError for a key or size that does not match the shards.
  void loadStateDict(const optim::OptimizerStateDict& state);

  /// Bytes of the swap buffers (what the states take in memory).
  int64_t memoryBytes() const;
  /// The swap file (for its size, direct I/O and bytes moved); null when the optimizer keeps no
  /// state (nothing to swap).
  const file::SwapFile* swapFile() const { return file_.get(); }
  int64_t subGroups() const { return static_cast<int64_t>(groups_.size()); }
  /// Sub-groups held in memory at once (buffer_count / states per element).
  int64_t residentSubGroups() const { return static_cast<int64_t>(slots_.size()); }

 private:
  struct Piece {  // the part of a shard inside one sub-group
    size_t shard;
    int64_t shard_offset;
    int64_t numel;
    int64_t group_offset;  // within the sub-group
    autograd::Variable var;
    std::vector<std::string> names;  // its state buffers; region j of the sub-group holds names[j]
  };
  struct SubGroup {
    int64_t numel = 0;
    std::vector<size_t> pieces;
    size_t regions = 0;  // how many state regions hold data
  };
  struct Slot {
    char* data = nullptr;
    int64_t group = -1;  // the sub-group whose states it holds now, -1 none
    std::vector<file::SwapFile::Ticket> reads, writes;
  };
  char* region(Slot& slot, size_t j) const { return slot.data + j * region_bytes_; }
  int64_t fileOffset(int64_t group, size_t j) const;
  size_t regionIoBytes(int64_t group) const;
  /// Makes slot hold sub-group k's states (reads them unless it already does); not waited.
  void load(int64_t k, Slot& slot);
  void waitReads(Slot& slot);
  void waitWrites(Slot& slot);
  void stepGroup(int64_t k, Slot& slot);

  std::shared_ptr<optim::Optimizer> optimizer_;
  std::vector<Shard> shards_;
  DType dtype_;
  NvmeOffloadOptions options_;
  int64_t states_ = 0;  // state elements per parameter element
  size_t region_bytes_ = 0;
  std::vector<Piece> pieces_;
  std::vector<SubGroup> groups_;
  std::vector<Slot> slots_;
  std::unique_ptr<char, void (*)(void*)> buffers_{nullptr, nullptr};
  std::unique_ptr<file::SwapFile> file_;
  std::function<void(size_t)> before_, after_;
};

}  // namespace lockstep::parallel
