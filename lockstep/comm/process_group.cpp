#include "lockstep/comm/process_group.h"

#include "lockstep/util/error.h"

namespace lockstep::comm {

const char* opTypeName(OpType t) {
  switch (t) {
    case OpType::allreduce: return "allreduce";
    case OpType::broadcast: return "broadcast";
    case OpType::reduce: return "reduce";
    case OpType::allgather: return "allgather";
    case OpType::allgatherv: return "allgatherv";
    case OpType::reduceScatter: return "reduce_scatter";
    case OpType::gather: return "gather";
    case OpType::scatter: return "scatter";
    case OpType::alltoall: return "alltoall";
    case OpType::barrier: return "barrier";
    case OpType::send: return "send";
    case OpType::recv: return "recv";
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
    std::lock_guard lock(mutex_);
    if (stop_ && !worker_.joinable()) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

std::shared_ptr<Work> ProcessGroup::enqueue(OpType type, const std::string& detail,
                                            std::chrono::milliseconds timeout, OpBody body) {
  if (timeout == kGroupTimeout) timeout = timeout_;
  OpContext ctx;
  ctx.type = type;
  // Point-to-point ops involve two ranks only, so they are numbered apart from collectives,
  // whose numbers must agree on every rank.
  bool p2p = type == OpType::send || type == OpType::recv;
  ctx.seq = p2p ? ++p2p_seq_ : ++seq_;
  ctx.timeout = timeout;
  ctx.name = ::lockstep::detail::concat(opTypeName(type), p2p ? " (p2p #" : " #", ctx.seq, p2p ? ")" : "");
  auto work = std::make_shared<Work>(::lockstep::detail::concat(
      ctx.name, " (", backendName(), ", rank ", rank_, "/", size_, detail.empty() ? "" : ", ",
      detail, ")"));
  {
    std::lock_guard lock(mutex_);
    LOCKSTEP_ENFORCE(!stop_, ValueError, work->description(), ": process group is shutting down");
    queue_.push_back(Item{work, std::move(ctx), std::move(body)});
    has_work_.store(true, std::memory_order_release);
  }
  cv_.notify_one();
  return work;
}

void ProcessGroup::workerLoop() {
  while (true) {
    // Back-to-back small collectives: poll briefly before sleeping on the condition variable.
    auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(100);
    while (!has_work_.load(std::memory_order_acquire) &&
           std::chrono::steady_clock::now() < spin_until) {
      std::this_thread::yield();
    }
    Item item;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and drained
      item = std::move(queue_.front());
      queue_.pop_front();
      has_work_.store(!queue_.empty(), std::memory_order_release);
    }
    std::exception_ptr error;
    if (!broken_.empty()) {
      error = std::make_exception_ptr(PeerError(::lockstep::detail::concat(
          item.work->description(), ": not run because the process group failed earlier: ",
          broken_)));
    } else {
      try {
        item.ctx.deadline = std::chrono::steady_clock::now() + item.ctx.timeout;
        item.body(item.ctx);
      } catch (const std::exception& e) {
        broken_ = e.what();
        error = std::current_exception();
      } catch (...) {
        broken_ = "unknown error";
        error = std::current_exception();
      }
    }
    item.work->finish(error);
  }
}

void ProcessGroup::notSupported(const char* what) const {
  throw NotSupportedError(::lockstep::detail::concat("backend ", backendName(),
                                                     " does not support ", what));
}

void ProcessGroup::checkRoot(int root, const char* what) const {
  LOCKSTEP_ENFORCE(root >= 0 && root < size_, ValueError, what, ": root ", root,
                   " is not a rank of this group of size ", size_);
}

void ProcessGroup::checkPeer(int peer, const char* what) const {
  LOCKSTEP_ENFORCE(peer >= 0 && peer < size_ && peer != rank_, ValueError, what, ": peer rank ",
                   peer, " is invalid for rank ", rank_, " of a group of size ", size_);
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
std::shared_ptr<Work> ProcessGroup::allgather(const void*, void*, size_t, DType,
                                              const AllgatherOptions&) {
  notSupported("allgather");
}
std::shared_ptr<Work> ProcessGroup::allgatherv(const void*, void*, const std::vector<size_t>&,
                                               DType, const AllgatherOptions&) {
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
std::shared_ptr<Work> ProcessGroup::alltoall(const void*, void*, size_t, DType,
                                             const AlltoallOptions&) {
  notSupported("alltoall");
}
std::shared_ptr<Work> ProcessGroup::barrier(const BarrierOptions&) { notSupported("barrier"); }
std::shared_ptr<Work> ProcessGroup::send(const void*, size_t, DType, int, const SendRecvOptions&) {
  notSupported("send");
}
std::shared_ptr<Work> ProcessGroup::recv(void*, size_t, DType, int, const SendRecvOptions&) {
  notSupported("recv");
}
std::shared_ptr<ProcessGroup> ProcessGroup::newGroup(const std::vector<int>&) {
  notSupported("newGroup");
}

}  // namespace lockstep::comm
