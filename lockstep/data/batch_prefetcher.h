#pragma once
// The DataLoader's engine: loads a fixed list of batches, in order, on background threads.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "lockstep/data/dataset.h"

namespace lockstep::data {

struct BatchPrefetcherOptions {
  /// Loader threads; 0 loads each batch in the thread that calls next().
  int64_t num_workers = 0;
  /// At most this many batches are loaded ahead of the consumer (num_workers * prefetch_factor).
  int64_t capacity = 2;
  /// For error messages only: the epoch and the epoch-relative number of batches[0].
  uint64_t epoch = 0;
  int64_t first_batch = 0;
  /// Run on the loading thread after gather() (e.g. copying the batch into pinned memory for a
  /// GPU); may be empty. A throw is the batch's loading error.
  std::function<Batch(Batch)> finish{};
};

/// Loads batches[0], batches[1], ... through dataset->gather() and hands them out strictly in that
/// order, whatever num_workers is and whichever worker finishes first: workers claim batch numbers
/// from a shared counter, results wait in a reorder map, and a worker may only claim a batch fewer
/// than `capacity` ahead of the consumer (a bounded queue). A worker's exception is stored in its
/// batch's slot and rethrown by next() when the consumer reaches that batch, with context (worker,
/// epoch, batch number, sample indices) and the original lockstep exception type.
///
/// Thread-safety: next() must be called from one thread at a time. Destroying the prefetcher
/// mid-epoch stops the workers after the batch each one is loading and joins them (no detach).
class BatchPrefetcher {
 public:
  BatchPrefetcher(std::shared_ptr<const Dataset> dataset, std::vector<std::vector<int64_t>> batches,
                  const BatchPrefetcherOptions& options);
  ~BatchPrefetcher();
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  /// The next batch in order, nullopt after the last one. Blocks until it is loaded; rethrows a
  /// loading failure (after which the prefetcher should be destroyed).
  std::optional<Batch> next();

 private:
  struct Slot {
    Batch batch;
    std::exception_ptr error;
  };

  std::shared_ptr<const Dataset> dataset_;
  std::vector<std::vector<int64_t>> batches_;
  BatchPrefetcherOptions options_;

  std::mutex mu_;
  std::condition_variable work_cv_;   // workers wait for room or stop
  std::condition_variable ready_cv_;  // the consumer waits for its batch
  int64_t next_task_ = 0;             // next batch number a worker will claim
  int64_t next_out_ = 0;              // next batch number the consumer takes
  bool stop_ = false;
  std::map<int64_t, Slot> ready_;
  std::vector<std::thread> workers_;

  void workerLoop(int64_t worker);
  Slot load(int64_t task, int64_t worker) const;
};

}  // namespace lockstep::data
