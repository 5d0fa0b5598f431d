#include "lockstep/comm/process_group.h"

#include <algorithm>
#include <thread>

#include "lockstep/comm/op_watch.h"
#include "lockstep/util/env.h"
#include "lockstep/util/error.h"

namespace lockstep::comm {

const char* opTypeName(OpType t) {
  switch (t) {
#define LOCKSTEP_OP_TYPE_NAME(op, name) \
  case OpType::op:                      \
    return name;
    LOCKSTEP_OP_TYPES(LOCKSTEP_OP_TYPE_NAME)
#undef LOCKSTEP_OP_TYPE_NAME
  }
  return "?";
}

ProcessGroup::ProcessGroup(int rank, int size) : rank_(rank), size_(size) {
  LOCKSTEP_ENFORCE(size >= 1 && rank >= 0 && rank < size, ValueError, "invalid rank ", rank,
                   " for a process group of size ", size, "; need 0 <= rank < size");
  worker_ = std::thread([this] { workerLoop(); });
}

ProcessGroup::~ProcessGroup() { stopWorker(); }

void ProcessGroup::stopWorker() {
  {
    std::lock_guard lock(executor_->mutex);
    executor_->stop = true;
  }
  executor_->cv.notify_all();
  if (worker_.joinable()) worker_.join();
}

OpContext ProcessGroup::nextOp(OpType type, std::chrono::milliseconds timeout) {
  if (timeout == kGroupTimeout) timeout = timeout_;
  OpContext ctx;
  ctx.type = type;
  // Point-to-point ops involve two ranks only, so they are numbered apart from collectives,
  // whose numbers must agree on every rank.
  bool p2p = type == OpType::send || type == OpType::recv;
  ctx.seq = p2p ? ++p2p_seq_ : ++seq_;
  ctx.timeout = timeout;
  ctx.name = ::lockstep::detail::concat(opTypeName(type), p2p ? " (p2p #" : " #", ctx.seq, p2p ? ")" : "");
  return ctx;
}

std::string ProcessGroup::describe(const OpContext& ctx, const std::string& detail) const {
  return ::lockstep::detail::concat(ctx.name, " (", backendName(), ", rank ", rank_, "/", size_,
                                    detail.empty() ? "" : ", ", detail, ")");
}

std::shared_ptr<Work> ProcessGroup::makeWork(const OpContext& ctx, const std::string& detail) {
  auto work = std::make_shared<Work>(describe(ctx, detail));
  std::weak_ptr<Executor> weak = executor_;
  work->setHelper([weak](const Work& w, bool run_here) {
    if (auto ex = weak.lock()) run_here ? ex->helpUntil(w) : ex->wake();
  });
  return work;
}

std::shared_ptr<Work> ProcessGroup::enqueue(OpType type, const std::string& detail,
                                            std::chrono::milliseconds timeout, OpBody body, bool defer) {
  OpContext ctx = nextOp(type, timeout);
  auto work = makeWork(ctx, detail);
  {
    std::lock_guard lock(executor_->mutex);
    LOCKSTEP_ENFORCE(!executor_->stop, ValueError, work->description(), ": process group is shutting down");
    executor_->queue.push_back(Item{work, std::move(ctx), std::move(body)});
  }
  if (!defer) executor_->cv.notify_all();
  return work;
}

std::shared_ptr<Work> ProcessGroup::enqueueOrRun(OpType type, const std::string& detail,
                                                 std::chrono::milliseconds timeout, OpBody body) {
  OpContext ctx = nextOp(type, timeout);
  auto work = makeWork(ctx, detail);
  Executor& ex = *executor_;
  std::unique_lock lock(ex.mutex);
  LOCKSTEP_ENFORCE(!ex.stop, ValueError, work->description(), ": process group is shutting down");
  Item item{work, std::move(ctx), std::move(body)};
  if (ex.busy || !ex.queue.empty()) {
    ex.queue.push_back(std::move(item));
    lock.unlock();
    ex.cv.notify_all();
    return work;
  }
  ex.busy = true;  // as helpUntil: runOne never runs concurrently
  lock.unlock();
  ex.runOne(item);
  lock.lock();
  ex.busy = false;
  if (!ex.queue.empty() || ex.stop) ex.cv.notify_all();
  return work;
}

namespace {

// LOCKSTEP_TEST_HANG_AT_OP=N: collective #N of every group in this process never returns and
// ignores its deadline, as a backend bug or a system call that never comes back would. Only for
// the tests of the agent's watchdog (tests/launch/), which must see such a rank named.
void hangIfAsked(const OpContext& ctx) {
  static const int64_t hang_at = env::getInt("LOCKSTEP_TEST_HANG_AT_OP", 0);
  if (hang_at <= 0 || static_cast<int64_t>(ctx.seq) != hang_at || ctx.type == OpType::send ||
      ctx.type == OpType::recv)
    return;
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

}  // namespace

void ProcessGroup::Executor::runOne(Item& item) {
  std::exception_ptr error;
  if (!broken.empty()) {
    error = std::make_exception_ptr(PeerError(::lockstep::detail::concat(
        item.work->description(), ": not run because the process group failed earlier: ", broken)));
  } else {
    try {
      item.ctx.deadline = std::chrono::steady_clock::now() + item.ctx.timeout;
      OpWatchScope watched(item.ctx);  // the agent's watchdog sees which op runs, and since when
      hangIfAsked(item.ctx);
      item.body(item.ctx);
    } catch (const std::exception& e) {
      broken = e.what();
      error = std::current_exception();
    } catch (...) {
      broken = "unknown error";
      error = std::current_exception();
    }
  }
  item.work->finish(error);
}

void ProcessGroup::Executor::wake() {
  { std::lock_guard lock(mutex); }
  cv.notify_all();
}

void ProcessGroup::Executor::helpUntil(const Work& work) {
  std::unique_lock lock(mutex);
  while (!work.isCompleted() && !busy && !queue.empty()) {
    Item item = std::move(queue.front());
    queue.pop_front();
    busy = true;
    lock.unlock();
    runOne(item);  // busy guarantees that runOne never runs concurrently: broken is safe
    lock.lock();
    busy = false;
    // Only the worker waits on cv, and it has something to do only if ops are left (or it is
    // told to stop). Waking it for nothing costs a step two context switches when it shares
    // the core (a rank bound to one core): tens of microseconds on a VM.
    if (!queue.empty() || stop) cv.notify_all();
  }
}

void ProcessGroup::workerLoop() {
  Executor& ex = *executor_;
  std::unique_lock lock(ex.mutex);
  while (true) {
    ex.cv.wait(lock,
               [&] { return (ex.stop && ex.queue.empty() && !ex.busy) || (!ex.busy && !ex.queue.empty()); });
    if (ex.queue.empty()) return;  // stopping and drained
    Item item = std::move(ex.queue.front());
    ex.queue.pop_front();
    ex.busy = true;
    lock.unlock();
    ex.runOne(item);
    lock.lock();
    ex.busy = false;
    ex.cv.notify_all();
  }
}

void ProcessGroup::notSupported(const char* what) const {
  throw NotSupportedError(::lockstep::detail::concat("backend ", backendName(), " does not support ", what));
}

void ProcessGroup::checkRoot(int root, const char* what) const {
  LOCKSTEP_ENFORCE(root >= 0 && root < size_, ValueError, what, ": root ", root,
                   " is not a rank of this group of size ", size_);
}

void ProcessGroup::checkPeer(int peer, const char* what) const {
  LOCKSTEP_ENFORCE(peer >= 0 && peer < size_ && peer != rank_, ValueError, what, ": peer rank ", peer,
                   " is invalid for rank ", rank_, " of a group of size ", size_);
}

std::shared_ptr<Work> ProcessGroup::allreduce(void*, size_t, DType, const AllreduceOptions&) {
  notSupported("allreduce");
}
std::shared_ptr<Work> ProcessGroup::broadcast(void*, size_t, DType, const BroadcastOptions&) {
  notSupported("broadcast");
}
std::shared_ptr<Work> ProcessGroup::reduce(void*, size_t, DType, const ReduceOptions&) {
  notSupported("reduce");
}
std::shared_ptr<Work> ProcessGroup::allgather(const void*, void*, size_t, DType, const AllgatherOptions&) {
  notSupported("allgather");
}
std::shared_ptr<Work> ProcessGroup::allgatherv(const void*, void*, const std::vector<size_t>&, DType,
                                               const AllgatherOptions&) {
  notSupported("allgatherv");
}
std::shared_ptr<Work> ProcessGroup::reduceScatter(const void*, void*, size_t, DType,
                                                  const ReduceScatterOptions&) {
  notSupported("reduce_scatter");
}
std::shared_ptr<Work> ProcessGroup::gather(const void*, void*, size_t, DType, const GatherOptions&) {
  notSupported("gather");
}
std::shared_ptr<Work> ProcessGroup::scatter(const void*, void*, size_t, DType, const ScatterOptions&) {
  notSupported("scatter");
}
std::shared_ptr<Work> ProcessGroup::alltoall(const void*, void*, size_t, DType, const AlltoallOptions&) {
  notSupported("alltoall");
}
std::shared_ptr<Work> ProcessGroup::barrier(const BarrierOptions&) { notSupported("barrier"); }
std::shared_ptr<Work> ProcessGroup::send(const void*, size_t, DType, int, const SendRecvOptions&) {
  notSupported("send");
}
std::shared_ptr<Work> ProcessGroup::recv(void*, size_t, DType, int, const SendRecvOptions&) {
  notSupported("recv");
}
void ProcessGroup::checkHostBuffers(const BufferPlace& place, const char* what) const {
  LOCKSTEP_ENFORCE(!place.onDevice(), ValueError, what, ": backend ", backendName(),
                   " moves host memory only, but the buffers are on cuda:", place.device,
                   "; use backend nccl for GPU buffers (or copy them to the host first)");
}

ProcessGroup::Subgroup ProcessGroup::subgroup(const std::vector<int>& ranks) const {
  Subgroup g{ranks};
  std::sort(g.ranks.begin(), g.ranks.end());
  LOCKSTEP_ENFORCE(!g.ranks.empty() && std::adjacent_find(g.ranks.begin(), g.ranks.end()) == g.ranks.end() &&
                       g.ranks.front() >= 0 && g.ranks.back() < size(),
                   ValueError, "newGroup: ranks must be unique ranks of this group of size ", size());
  auto it = std::find(g.ranks.begin(), g.ranks.end(), rank());
  if (it != g.ranks.end()) g.rank = static_cast<int>(it - g.ranks.begin());
  return g;
}

std::shared_ptr<ProcessGroup> ProcessGroup::newGroup(const std::vector<int>&) { notSupported("newGroup"); }

}  // namespace lockstep::comm
