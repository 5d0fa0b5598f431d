#include "lockstep/comm/work.h"

#include <thread>

#include "lockstep/util/error.h"

namespace lockstep::comm {

Work::Work(std::string description) : description_(std::move(description)) {}

std::exception_ptr Work::exception() const {
  std::lock_guard lock(mutex_);
  return error_;
}

void Work::finish(std::exception_ptr error) {
  {
    std::lock_guard lock(mutex_);
    error_ = std::move(error);
    completed_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

void Work::wait(std::chrono::milliseconds timeout) {
  if (!isCompleted() && helper_) helper_(*this, timeout >= kForever);
  if (!isCompleted()) {
    // Small collectives finish within microseconds: yielding briefly beats a futex round trip,
    // and yield (not a busy spin) leaves the core to the worker thread on small machines.
    auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
    while (!isCompleted() && std::chrono::steady_clock::now() < spin_until) std::this_thread::yield();
  }
  std::unique_lock lock(mutex_);
  if (!cv_.wait_for(lock, timeout, [&] { return isCompleted(); })) {
    throw TimeoutError(::lockstep::detail::concat(description_, ": Work::wait timed out after ",
                                                  timeout.count(), " ms; the op is still running"));
  }
  if (error_) std::rethrow_exception(error_);
}

PostedWork::PostedWork(std::shared_ptr<Work> posting)
    : Work(posting->description()), posting_(std::move(posting)) {}

bool PostedWork::isCompleted() const {
  return Work::isCompleted() ||
         (posting_->isCompleted() && (posting_->exception() != nullptr || transferFinished()));
}

void PostedWork::wait(std::chrono::milliseconds timeout) {
  {
    std::lock_guard lock(waiting_);
    if (!Work::isCompleted()) {
      std::exception_ptr error;
      bool over = true;
      try {
        posting_->wait(timeout);
        over = awaitTransfer(timeout);
      } catch (...) {
        error = std::current_exception();
        over = posting_->isCompleted();  // a posting still queued when the wait's limit passed goes on
      }
      if (!over) {
        if (error) std::rethrow_exception(error);
        throw TimeoutError(::lockstep::detail::concat(description(), ": Work::wait timed out after ",
                                                      timeout.count(), " ms; the op is still running"));
      }
      finish(error);
    }
  }
  Work::wait(timeout);  // done: rethrows the op's error
}

}  // namespace lockstep::comm
