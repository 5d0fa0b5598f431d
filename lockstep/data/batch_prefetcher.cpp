#include "lockstep/data/batch_prefetcher.h"

#include <sstream>

namespace lockstep::data {

namespace {
// Rethrows `ep` as the same lockstep exception type with `context` prepended.
template <typename E>
bool rewrap(const std::exception& e, const std::string& context, std::exception_ptr& out) {
  if (dynamic_cast<const E*>(&e) == nullptr) return false;
  out = std::make_exception_ptr(E(context + e.what()));
  return true;
}

std::exception_ptr withContext(std::exception_ptr ep, const std::string& context) {
  try {
    std::rethrow_exception(ep);
  } catch (const std::exception& e) {
    std::exception_ptr out;
    if (rewrap<IoError>(e, context, out) || rewrap<ValueError>(e, context, out) ||
        rewrap<TimeoutError>(e, context, out) || rewrap<PeerError>(e, context, out) ||
        rewrap<NotSupportedError>(e, context, out) || rewrap<InternalError>(e, context, out)) {
      return out;
    }
    return std::make_exception_ptr(Error(context + e.what()));
  } catch (...) {
    return std::make_exception_ptr(Error(context + "unknown exception"));
  }
}

std::string describeIndices(const std::vector<int64_t>& idx) {
  std::ostringstream os;
  os << idx.size() << " samples [";
  for (size_t i = 0; i < idx.size() && i < 8; ++i) os << (i ? ", " : "") << idx[i];
  if (idx.size() > 8) os << ", ...";
  os << "]";
  return os.str();
}
}  // namespace

BatchPrefetcher::BatchPrefetcher(std::shared_ptr<const Dataset> dataset,
                                 std::vector<std::vector<int64_t>> batches,
                                 const BatchPrefetcherOptions& options)
    : dataset_(std::move(dataset)), batches_(std::move(batches)), options_(options) {
  LOCKSTEP_ENFORCE(dataset_ != nullptr, ValueError, "BatchPrefetcher needs a dataset");
  LOCKSTEP_ENFORCE(options.num_workers >= 0, ValueError, "num_workers must be >= 0, got ",
                   options.num_workers);
  LOCKSTEP_ENFORCE(options.capacity >= 1, ValueError, "prefetch capacity must be >= 1, got ",
                   options.capacity);
  const int64_t threads = std::min<int64_t>(options.num_workers, static_cast<int64_t>(batches_.size()));
  workers_.reserve(static_cast<size_t>(threads));
  try {
    for (int64_t w = 0; w < threads; ++w) workers_.emplace_back([this, w] { workerLoop(w); });
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : workers_) t.join();
    throw;
  }
}

BatchPrefetcher::~BatchPrefetcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

BatchPrefetcher::Slot BatchPrefetcher::load(int64_t task, int64_t worker) const {
  Slot slot;
  try {
    slot.batch = dataset_->gather(batches_[static_cast<size_t>(task)]);
    if (options_.finish) slot.batch = options_.finish(std::move(slot.batch));
  } catch (...) {
    std::ostringstream ctx;
    ctx << "DataLoader " << (worker < 0 ? std::string("(main thread)") : "worker " + std::to_string(worker))
        << ": loading batch " << options_.first_batch + task << " of epoch " << options_.epoch << " ("
        << describeIndices(batches_[static_cast<size_t>(task)]) << ") failed: ";
    slot.error = withContext(std::current_exception(), ctx.str());
  }
  return slot;
}

void BatchPrefetcher::workerLoop(int64_t worker) {
  const auto total = static_cast<int64_t>(batches_.size());
  while (true) {
    int64_t task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(
          lock, [&] { return stop_ || next_task_ >= total || next_task_ < next_out_ + options_.capacity; });
      if (stop_ || next_task_ >= total) return;
      task = next_task_++;
    }
    Slot slot = load(task, worker);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      ready_.emplace(task, std::move(slot));
    }
    ready_cv_.notify_one();
  }
}

std::optional<Batch> BatchPrefetcher::next() {
  if (next_out_ >= static_cast<int64_t>(batches_.size())) return std::nullopt;
  Slot slot;
  if (workers_.empty()) {
    slot = load(next_out_, -1);
    ++next_out_;
  } else {
    std::unique_lock<std::mutex> lock(mu_);
    ready_cv_.wait(lock, [&] { return ready_.count(next_out_) > 0; });
    auto it = ready_.find(next_out_);
    slot = std::move(it->second);
    ready_.erase(it);
    ++next_out_;
    lock.unlock();
    work_cv_.notify_all();
  }
  if (slot.error) std::rethrow_exception(slot.error);
  return std::move(slot.batch);
}

}  // namespace lockstep::data
