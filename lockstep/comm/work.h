#pragma once
// Handle of one asynchronous collective (c10d's Work). The process group's worker thread
// completes it; any thread may wait on it.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace lockstep::comm {

class Work {
 public:
  /// wait()'s default: no limit of its own (the op still ends at its own timeout).
  static constexpr std::chrono::milliseconds kForever = std::chrono::hours(24 * 30);

  /// description names the op for messages, e.g. "allreduce #12 (gloo, 1024 x f32)".
  explicit Work(std::string description);
  /// Backends whose ops complete on a device (nccl) override isCompleted and wait.
  virtual ~Work() = default;

  /// True once the op finished, successfully or not. Thread-safe, never blocks.
  virtual bool isCompleted() const { return completed_.load(std::memory_order_acquire); }
  /// The op's error, or nullptr while running or after success. Thread-safe.
  std::exception_ptr exception() const;
  /// Blocks until the op finished and rethrows its error. TimeoutError naming the op when it has
  /// not finished within timeout (the op itself keeps running and fails at its own timeout).
  /// Thread-safe. With the default timeout, when the op has not started yet, the calling thread
  /// runs the group's queued ops itself (in order, up to this one) instead of handing off to
  /// the worker thread; with an explicit timeout it only waits.
  virtual void wait(std::chrono::milliseconds timeout = kForever);
  const std::string& description() const { return description_; }

  /// Called once by the backend when the op finished; wakes waiters.
  void finish(std::exception_ptr error = nullptr);
  /// Backend plumbing: called by wait() before blocking, with run_here = true to run queued ops
  /// inline (default timeout), false to make sure the worker runs them (explicit timeout).
  void setHelper(std::function<void(const Work&, bool run_here)> helper) { helper_ = std::move(helper); }

 private:
  std::string description_;
  std::atomic<bool> completed_{false};
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::exception_ptr error_;
  std::function<void(const Work&, bool)> helper_;
};

/// A send or receive that the group's queue posts and the backend completes beside the queue
/// (gloo, shm): done once its posting op ran and then its transfer finished. wait() waits for the
/// posting (running the queue up to it on this thread when idle), then awaitTransfer().
class PostedWork : public Work {
 public:
  explicit PostedWork(std::shared_ptr<Work> posting);
  /// Also true once the posting failed, or ran and transferFinished() says the transfer is over
  /// (its error then comes from wait()).
  bool isCompleted() const override;
  void wait(std::chrono::milliseconds timeout = kForever) override;

 protected:
  /// After the posting ran: waits up to timeout for the transfer and throws its error; false when
  /// timeout passed first and the transfer goes on (wait() then throws TimeoutError and the Work
  /// stays pending).
  virtual bool awaitTransfer(std::chrono::milliseconds timeout) = 0;
  /// Whether the transfer is over without waiting; false where the backend cannot tell.
  virtual bool transferFinished() const { return false; }

 private:
  std::shared_ptr<Work> posting_;
  std::mutex waiting_;
};

}  // namespace lockstep::comm
