#pragma once
// Dataset: random access to samples by index, plus a batched gather() that the DataLoader calls.
#include <cstdint>
#include <vector>

#include "lockstep/data/example.h"

namespace lockstep::data {

/// A map-style dataset (torch.utils.data.Dataset): size() samples addressed 0..size()-1.
///
/// Thread-safety: the DataLoader calls get() and gather() from several worker threads at once, so
/// both must be safe to call concurrently (they are const and must not mutate shared state).
/// setEpoch() is called only between epochs, when no worker is running.
class Dataset {
 public:
  virtual ~Dataset() = default;

  /// Number of samples.
  virtual int64_t size() const = 0;
  /// Sample `index` (0 <= index < size(); ValueError otherwise). The returned tensors are the
  /// caller's: mutating them never changes the dataset.
  virtual Example get(int64_t index) const = 0;
  /// The samples `indices`, stacked. The default calls get() per index and copies the results into
  /// one batch; datasets backed by whole tensors override it with direct row copies (the fast path
  /// the DataLoader relies on). Every sample must have the same shapes and dtypes.
  virtual Batch gather(const std::vector<int64_t>& indices) const;
  /// Tells epoch-dependent datasets (random augmentation) which epoch is being loaded. Default:
  /// nothing. Not thread-safe against concurrent get()/gather().
  virtual void setEpoch(uint64_t epoch) {}

 protected:
  /// ValueError unless 0 <= index < size(); `who` names the dataset in the message.
  void checkIndex(int64_t index, const char* who) const;
};

/// Stacks examples into a batch (the default collate): inputs [B, ...], targets [B, ...].
/// ValueError if shapes or dtypes differ between examples, naming the first offending index.
Batch stackExamples(const std::vector<Example>& examples, std::vector<int64_t> indices);

}  // namespace lockstep::data
