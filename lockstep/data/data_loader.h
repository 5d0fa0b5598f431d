#pragma once
// DataLoader: batches of a Dataset in a sampler's order, loaded ahead on background threads.
#include <iterator>
#include <memory>

#include "lockstep/data/batch_prefetcher.h"
#include "lockstep/data/dataset.h"
#include "lockstep/data/samplers/batch_sampler.h"
#include "lockstep/data/samplers/sampler.h"
#include "lockstep/tensor/device.h"

namespace lockstep::data {

struct DataLoaderOptions {
  int64_t batch_size = 1;
  /// Without an explicit sampler: RandomSampler(seed) when true, SequentialSampler otherwise.
  /// Must stay false when a sampler is given (as in torch).
  bool shuffle = false;
  bool drop_last = false;
  uint64_t seed = 0;
  /// Background loader threads; 0 loads in the iterating thread. Threads are not pinned.
  int64_t num_workers = 0;
  /// Batches loaded ahead per worker (queue bound = num_workers * prefetch_factor).
  int64_t prefetch_factor = 2;
  /// Where batches are handed out. A GPU (cuda:N): the loading threads copy each batch into pinned
  /// host memory (torch's pin_memory=True) and the loader copies it to the device on a side stream
  /// one batch ahead, so the copy overlaps the previous step (NotSupportedError in a build without
  /// CUDA). cpu: as loaded.
  Device device = Device::cpu();
};

class DeviceFeeder;

/// Iterates over one epoch of batches per `for` loop:
///
///   DataLoader loader(dataset, {.batch_size = 64, .shuffle = true, .num_workers = 2});
///   for (uint64_t e = 0; e < epochs; ++e) {
///     loader.setEpoch(e);
///     for (Batch& batch : loader) train(batch.input, batch.target);
///   }
///
/// Batches come out in exactly the same order and with the same content for any num_workers: the
/// order is fixed by the sampler for the epoch, and every batch is loaded by Dataset::gather()
/// (TensorDataset's row-copy fast path; no per-sample Example objects). Random transforms depend
/// on (epoch, index), not on the thread. A worker's exception is rethrown from the loop (begin()
/// or ++) with the worker, epoch, batch and indices prepended and its lockstep type kept.
///
/// Each begin() starts a fresh pass over the current epoch (from 0, or from the batch set by
/// skip()/loadState()); leaving a loop early and destroying or restarting the loader stops and
/// joins the workers. state() = {epoch, batches handed out in this epoch} is what a checkpoint
/// saves; loadState() resumes there.
///
/// Thread-safety: a DataLoader is used from one thread; only its internal workers run concurrently
/// (calling the dataset's const gather()). Not collective, but under DDP every rank must use the
/// same epoch and batch count (DistributedSampler guarantees equal counts).
class DataLoader {
 public:
  class Iterator {
   public:
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    Batch& operator*() const { return loader_->current_; }
    Batch* operator->() const { return &loader_->current_; }
    /// Fetches the next batch; rethrows a loading failure.
    Iterator& operator++();
    bool operator==(std::default_sentinel_t) const { return !loader_->has_current_; }

   private:
    friend class DataLoader;
    explicit Iterator(DataLoader* loader) : loader_(loader) {}
    DataLoader* loader_;
  };

  /// Sequential or random (options.shuffle) sampling over the whole dataset.
  DataLoader(std::shared_ptr<Dataset> dataset, const DataLoaderOptions& options = {});
  /// Sampling by `sampler` (e.g. a DistributedSampler); ValueError if options.shuffle is set.
  /// The sampler's indices are checked against the dataset when batches are loaded.
  DataLoader(std::shared_ptr<Dataset> dataset, std::shared_ptr<Sampler> sampler,
             const DataLoaderOptions& options = {});
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// Starts a pass over the current epoch (stopping any pass in progress) and loads its first batch.
  Iterator begin();
  std::default_sentinel_t end() const { return {}; }

  /// Batches per epoch (len(loader)).
  int64_t size() const { return batch_sampler_.size(); }
  /// Selects the epoch (sampler order and dataset augmentation); the next pass starts at its
  /// beginning. Stops a pass in progress.
  void setEpoch(uint64_t epoch);
  uint64_t epoch() const { return batch_sampler_.epoch(); }
  /// The next pass starts n batches into the current epoch (0 <= n <= size(); ValueError
  /// otherwise), to resume mid-epoch. Stops a pass in progress.
  void skip(int64_t n);
  /// {epoch, batches of this epoch handed out so far (skipped ones included)}.
  SamplerState state() const { return batch_sampler_.state(); }
  /// setEpoch(state.epoch) then skip(state.position).
  void loadState(const SamplerState& state);

  const DataLoaderOptions& options() const { return options_; }
  const BatchSampler& batchSampler() const { return batch_sampler_; }
  /// Seconds the iterating thread has spent in begin() and ++ waiting for batches (loading, and
  /// the copy to the device when it is not ahead), over the loader's life: what a training loop
  /// reports as its data wait.
  double waitSeconds() const { return wait_seconds_; }

 private:
  std::shared_ptr<Dataset> dataset_;
  DataLoaderOptions options_;
  BatchSampler batch_sampler_;
  int64_t resume_from_ = 0;
  Batch current_;
  bool has_current_ = false;
  double wait_seconds_ = 0;
  std::unique_ptr<DeviceFeeder> feeder_;         // null: batches stay on the host
  std::unique_ptr<BatchPrefetcher> prefetcher_;  // last: destroyed (joined) first; its workers use feeder_

  void fetchNext();
  std::optional<Batch> loadNext();
  std::optional<Batch> feedThrough(std::optional<Batch> loaded);
  void stop();
};

}  // namespace lockstep::data
