#include "lockstep/data/data_loader.h"

#include <chrono>

#include "lockstep/data/samplers/random_sampler.h"
#include "lockstep/data/samplers/sequential_sampler.h"

#if LOCKSTEP_WITH_CUDA
#include "lockstep/data/cuda/device_feeder.h"
#else
namespace lockstep::data {
class DeviceFeeder {};  // never made without CUDA; complete for unique_ptr's destructor
}  // namespace lockstep::data
#endif

namespace lockstep::data {

namespace {
std::shared_ptr<Sampler> defaultSampler(const std::shared_ptr<Dataset>& dataset,
                                        const DataLoaderOptions& options) {
  LOCKSTEP_ENFORCE(dataset != nullptr, ValueError, "DataLoader needs a dataset");
  if (options.shuffle) return std::make_shared<RandomSampler>(dataset->size(), options.seed);
  return std::make_shared<SequentialSampler>(dataset->size());
}

double secondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

const DataLoaderOptions& checked(const DataLoaderOptions& o, bool custom_sampler) {
  LOCKSTEP_ENFORCE(
      !(custom_sampler && o.shuffle), ValueError,
      "DataLoader: sampler option is mutually exclusive with shuffle (shuffle with the sampler's own "
      "options, e.g. DistributedSamplerOptions::shuffle)");
  LOCKSTEP_ENFORCE(o.num_workers >= 0, ValueError, "DataLoader: num_workers must be >= 0, got ",
                   o.num_workers);
  LOCKSTEP_ENFORCE(o.prefetch_factor >= 1, ValueError, "DataLoader: prefetch_factor must be >= 1, got ",
                   o.prefetch_factor);
  LOCKSTEP_ENFORCE(o.batch_size >= 1, ValueError, "DataLoader: batch_size must be >= 1, got ", o.batch_size);
  LOCKSTEP_ENFORCE(o.device.isCpu() || LOCKSTEP_WITH_CUDA, NotSupportedError, "DataLoader: device ",
                   deviceName(o.device), " needs CUDA: this lockstep was built without it (LOCKSTEP_CUDA)");
  return o;
}

std::unique_ptr<DeviceFeeder> makeFeeder([[maybe_unused]] Device device) {
#if LOCKSTEP_WITH_CUDA
  if (device.isCuda()) return std::make_unique<DeviceFeeder>(device);
#endif
  return nullptr;
}
}  // namespace

DataLoader::DataLoader(std::shared_ptr<Dataset> dataset, const DataLoaderOptions& options)
    : dataset_(dataset),
      options_(checked(options, false)),
      batch_sampler_(defaultSampler(dataset, options), {options.batch_size, options.drop_last}),
      feeder_(makeFeeder(options.device)) {}

DataLoader::DataLoader(std::shared_ptr<Dataset> dataset, std::shared_ptr<Sampler> sampler,
                       const DataLoaderOptions& options)
    : dataset_(std::move(dataset)),
      options_(checked(options, true)),
      batch_sampler_(std::move(sampler), {options.batch_size, options.drop_last}) {
  LOCKSTEP_ENFORCE(dataset_ != nullptr, ValueError, "DataLoader needs a dataset");
  feeder_ = makeFeeder(options_.device);
}

DataLoader::~DataLoader() { stop(); }

void DataLoader::stop() {
  prefetcher_.reset();
#if LOCKSTEP_WITH_CUDA
  if (feeder_) feeder_->clear();
#endif
  has_current_ = false;
}

DataLoader::Iterator DataLoader::begin() {
  const auto started = std::chrono::steady_clock::now();  // starting the workers is waiting too
  stop();
  const uint64_t epoch = batch_sampler_.epoch();
  const int64_t start = resume_from_;
  resume_from_ = 0;
  batch_sampler_.loadState({epoch, start});
  std::vector<std::vector<int64_t>> batches = batch_sampler_.epochBatches(epoch);
  batches.erase(batches.begin(), batches.begin() + start);
  BatchPrefetcherOptions po;
  po.num_workers = options_.num_workers;
  po.capacity = std::max<int64_t>(1, options_.num_workers * options_.prefetch_factor);
  po.epoch = epoch;
  po.first_batch = start;
#if LOCKSTEP_WITH_CUDA
  if (feeder_) po.finish = [feeder = feeder_.get()](Batch b) { return feeder->pin(b); };
#endif
  prefetcher_ = std::make_unique<BatchPrefetcher>(dataset_, std::move(batches), po);
  fetchNext();
  wait_seconds_ += secondsSince(started);
  return Iterator(this);
}

void DataLoader::fetchNext() {
  has_current_ = false;
  if (prefetcher_) {
    std::optional<Batch> b = feedThrough(loadNext());
    if (b) {
      current_ = std::move(*b);
      has_current_ = true;
      batch_sampler_.advance(1);
    } else {
      prefetcher_.reset();  // epoch done: join the workers now, not at the next begin()
    }
  }
}

std::optional<Batch> DataLoader::loadNext() {
  try {
    return prefetcher_->next();
  } catch (...) {
    stop();
    throw;
  }
}

// On a GPU, batch k is handed out once its copy is queued ahead of the caller's next work, and
// batch k+1's copy starts right away on the side stream, overlapping step k.
std::optional<Batch> DataLoader::feedThrough(std::optional<Batch> loaded) {
#if LOCKSTEP_WITH_CUDA
  if (!feeder_) return loaded;
  if (!feeder_->staged()) {  // the pass's first batch
    if (!loaded) return std::nullopt;
    feeder_->stage(std::move(*loaded));
    loaded = loadNext();
  }
  Batch out = feeder_->take();
  if (loaded) feeder_->stage(std::move(*loaded));
  return out;
#else
  return loaded;
#endif
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  const auto started = std::chrono::steady_clock::now();
  loader_->fetchNext();
  loader_->wait_seconds_ += secondsSince(started);
  return *this;
}

void DataLoader::setEpoch(uint64_t epoch) {
  stop();
  batch_sampler_.setEpoch(epoch);
  dataset_->setEpoch(epoch);
  resume_from_ = 0;
}

void DataLoader::skip(int64_t n) {
  LOCKSTEP_ENFORCE(n >= 0 && n <= size(), ValueError, "DataLoader::skip: ", n, " is outside 0..", size(),
                   " batches of the epoch");
  stop();
  batch_sampler_.loadState({batch_sampler_.epoch(), n});
  resume_from_ = n;
}

void DataLoader::loadState(const SamplerState& state) {
  LOCKSTEP_ENFORCE(state.position >= 0 && state.position <= size(), ValueError,
                   "DataLoader::loadState: position ", state.position, " is outside 0..", size(),
                   " batches (was the dataset, batch size or world size changed?)");
  setEpoch(state.epoch);
  skip(state.position);
}

}  // namespace lockstep::data
