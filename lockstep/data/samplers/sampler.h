#pragma once
// Samplers decide which dataset indices an epoch visits and in what order. The order is a pure
// function of (sampler options, epoch), so a resumed run or another rank can recompute it; the only
// mutable state is (epoch, position), which is what a checkpoint saves.
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <vector>

namespace lockstep::data {

/// Where a sampler (or a BatchSampler / DataLoader, counting batches) stands: the epoch and how
/// many items of that epoch were already consumed.
struct SamplerState {
  uint64_t epoch = 0;
  int64_t position = 0;

  bool operator==(const SamplerState&) const = default;
  /// {"epoch": e, "position": p}.
  nlohmann::json toJson() const;
  /// Inverse of toJson; ValueError naming the missing/bad field.
  static SamplerState fromJson(const nlohmann::json& j);
};

/// Base of the index samplers (torch.utils.data.Sampler).
///
/// Thread-safety: epochIndices() is const and pure, safe from any thread; setEpoch(), advance()
/// and loadState() mutate and must not race with other calls on the same sampler.
class Sampler {
 public:
  virtual ~Sampler() = default;

  /// Number of indices one epoch yields.
  virtual int64_t size() const = 0;
  /// The whole index order of `epoch` (size() entries). Pure: same answer for the same epoch.
  virtual std::vector<int64_t> epochIndices(uint64_t epoch) const = 0;

  /// The indices of the current epoch not consumed yet (epochIndices(epoch())[position()..]).
  std::vector<int64_t> remainingIndices() const;
  /// Selects the epoch whose order is used next (like torch's set_epoch) and rewinds to its start.
  void setEpoch(uint64_t epoch);
  uint64_t epoch() const { return epoch_; }
  /// Items of the current epoch consumed so far.
  int64_t position() const { return position_; }
  /// Marks n more items as consumed; ValueError past the end of the epoch.
  void advance(int64_t n);
  SamplerState state() const { return {epoch_, position_}; }
  /// Restores a saved state; ValueError when position is outside 0..size().
  void loadState(const SamplerState& state);

 private:
  uint64_t epoch_ = 0;
  int64_t position_ = 0;
};

/// A uniformly random permutation of 0..n-1 (Fisher-Yates over a Philox Generator(seed)).
/// Deterministic in (n, seed); not the same permutation torch.randperm gives.
std::vector<int64_t> randomPermutation(int64_t n, uint64_t seed);

}  // namespace lockstep::data
