#pragma once
// A group of ranks and the collectives among them (c10d's ProcessGroup). Buffers are typed raw
// memory (pointer + element count + DType); comm/ knows nothing of tensors.
//
// Every collective is collective: all ranks of the group must issue the same collectives in the
// same order (with matching counts/dtypes/roots). Each call validates its arguments, takes the
// next sequence number, enqueues the op on the group's worker thread and returns a Work at once,
// so compute overlaps communication; ops complete in issue order. A thread that waits on a Work
// whose op has not started yet runs the queued ops itself (in order, never two at once), which
// saves two thread hand-offs per small collective. Buffers must stay valid and
// untouched until the Work completes. Issue collectives of one group from one thread at a time.
// A backend may complete send and recv beside the queue (gloo, shm: the queue posts them in order
// and the transfer completes in the backend), so that a receive waiting for its data holds no
// later op back.
//
// Failure: each op has a timeout (options.timeout, else the group's, default 5 min). A peer
// that dies or does not arrive makes the op fail with PeerError/TimeoutError naming the op, its
// sequence number and the missing ranks; an op whose peers issued a different op fails with
// PeerError saying so. After such an error the group is broken: later ops fail at once.
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lockstep/comm/reduce_op.h"
#include "lockstep/comm/work.h"
#include "lockstep/util/dtype.h"

namespace lockstep::comm {

/// 0 ms in an op's options means "the group's default timeout".
inline constexpr std::chrono::milliseconds kGroupTimeout{0};
/// The group timeout when nobody chose one (InitOptions.timeout, LOCKSTEP_TIMEOUT, `lockstep run
/// --timeout`, the config's comm_timeout_seconds): 5 minutes, not torch's 30, so that a stuck or
/// partitioned peer ends the job in minutes; long enough for a slow checkpoint on one rank.
inline constexpr std::chrono::milliseconds kDefaultCollectiveTimeout = std::chrono::minutes(5);

/// Where an op's buffers live. comm/ knows nothing of tensors: the caller (a tensor's device and
/// the current stream) says. Host backends (shm, gloo, mpi) take host memory only and reject a
/// device buffer with a ValueError naming the op and the backend that moves it (nccl).
struct BufferPlace {
  /// -1: host memory; N >= 0: memory of cuda:N.
  int device = -1;
  /// For device buffers: the cudaStream_t (passed as void* so that comm's headers need no CUDA)
  /// on which the data is ready, the caller's compute stream; nullptr is CUDA's default stream.
  /// The NCCL group's communication stream waits on it, and Work::wait makes it wait on the op.
  void* stream = nullptr;
  bool onDevice() const { return device >= 0; }
};

struct AllreduceOptions {
  BufferPlace place = {};  // host memory unless set
  ReduceOp op = ReduceOp::sum;
  std::chrono::milliseconds timeout = kGroupTimeout;
  /// Queue the op without waking the group's worker thread: the thread that waits on its Work
  /// runs it (or the worker, when a later op wakes it). For an op the caller waits on at once:
  /// it saves two thread hand-offs. An op only polled with isCompleted() would not progress.
  bool defer = false;
};
struct BroadcastOptions {
  BufferPlace place = {};  // host memory unless set
  int root = 0;
  std::chrono::milliseconds timeout = kGroupTimeout;
};
struct ReduceOptions {
  BufferPlace place = {};  // host memory unless set
  ReduceOp op = ReduceOp::sum;
  int root = 0;
  std::chrono::milliseconds timeout = kGroupTimeout;
};
struct AllgatherOptions {
  BufferPlace place = {};  // host memory unless set
  std::chrono::milliseconds timeout = kGroupTimeout;
};
struct ReduceScatterOptions {
  BufferPlace place = {};  // host memory unless set
  ReduceOp op = ReduceOp::sum;
  std::chrono::milliseconds timeout = kGroupTimeout;
};
struct GatherOptions {
  BufferPlace place = {};  // host memory unless set
  int root = 0;
  std::chrono::milliseconds timeout = kGroupTimeout;
};
struct ScatterOptions {
  BufferPlace place = {};  // host memory unless set
  int root = 0;
  std::chrono::milliseconds timeout = kGroupTimeout;
};
struct AlltoallOptions {
  BufferPlace place = {};  // host memory unless set
  std::chrono::milliseconds timeout = kGroupTimeout;
};
struct BarrierOptions {
  BufferPlace place = {};  // host memory unless set
  std::chrono::milliseconds timeout = kGroupTimeout;
};
struct SendRecvOptions {
  BufferPlace place = {};  // host memory unless set
  int tag = 0;
  std::chrono::milliseconds timeout = kGroupTimeout;
};

/// What an op is, as checked against the peers' ops of the same sequence number: one entry per op
/// of ProcessGroup below, with the name messages use.
// clang-format off
#define LOCKSTEP_OP_TYPES(X) \
  X(allreduce, "allreduce") \
  X(broadcast, "broadcast") \
  X(reduce, "reduce") \
  X(allgather, "allgather") \
  X(allgatherv, "allgatherv") \
  X(reduceScatter, "reduce_scatter") \
  X(gather, "gather") \
  X(scatter, "scatter") \
  X(alltoall, "alltoall") \
  X(barrier, "barrier") \
  X(send, "send") \
  X(recv, "recv")
// clang-format on
#define LOCKSTEP_OP_TYPE_ENUMERATOR(op, name) op,
enum class OpType : uint8_t { LOCKSTEP_OP_TYPES(LOCKSTEP_OP_TYPE_ENUMERATOR) };
#undef LOCKSTEP_OP_TYPE_ENUMERATOR
const char* opTypeName(OpType t);

/// Passed to the backend's op body on the worker thread.
struct OpContext {
  OpType type;
  uint64_t seq;  // 1-based number among the group's collectives (send/recv: among its p2p ops)
  std::chrono::steady_clock::time_point deadline;
  std::chrono::milliseconds timeout;
  std::string name;  // "allreduce #7" for messages
};

/// A backend's declarations of the twelve ops of ProcessGroup (allreduce .. recv), written once:
/// a backend class says `LOCKSTEP_PROCESS_GROUP_OPS_OVERRIDE` in its public section and defines
/// them all. The defaults match the base class's, so a call through the backend's type reads alike.
#define LOCKSTEP_PROCESS_GROUP_OPS_OVERRIDE                                                                  \
  std::shared_ptr<::lockstep::comm::Work> allreduce(void* data, size_t count, ::lockstep::DType dtype,       \
                                                    const ::lockstep::comm::AllreduceOptions& opts = {})     \
      override;                                                                                              \
  std::shared_ptr<::lockstep::comm::Work> broadcast(void* data, size_t count, ::lockstep::DType dtype,       \
                                                    const ::lockstep::comm::BroadcastOptions& opts = {})     \
      override;                                                                                              \
  std::shared_ptr<::lockstep::comm::Work> reduce(void* data, size_t count, ::lockstep::DType dtype,          \
                                                 const ::lockstep::comm::ReduceOptions& opts = {}) override; \
  std::shared_ptr<::lockstep::comm::Work> allgather(                                                         \
      const void* in, void* out, size_t count, ::lockstep::DType dtype,                                      \
      const ::lockstep::comm::AllgatherOptions& opts = {}) override;                                         \
  std::shared_ptr<::lockstep::comm::Work> allgatherv(                                                        \
      const void* in, void* out, const std::vector<size_t>& counts, ::lockstep::DType dtype,                 \
      const ::lockstep::comm::AllgatherOptions& opts = {}) override;                                         \
  std::shared_ptr<::lockstep::comm::Work> reduceScatter(                                                     \
      const void* in, void* out, size_t count, ::lockstep::DType dtype,                                      \
      const ::lockstep::comm::ReduceScatterOptions& opts = {}) override;                                     \
  std::shared_ptr<::lockstep::comm::Work> gather(const void* in, void* out, size_t count,                    \
                                                 ::lockstep::DType dtype,                                    \
                                                 const ::lockstep::comm::GatherOptions& opts = {}) override; \
  std::shared_ptr<::lockstep::comm::Work> scatter(                                                           \
      const void* in, void* out, size_t count, ::lockstep::DType dtype,                                      \
      const ::lockstep::comm::ScatterOptions& opts = {}) override;                                           \
  std::shared_ptr<::lockstep::comm::Work> alltoall(                                                          \
      const void* in, void* out, size_t count, ::lockstep::DType dtype,                                      \
      const ::lockstep::comm::AlltoallOptions& opts = {}) override;                                          \
  std::shared_ptr<::lockstep::comm::Work> barrier(const ::lockstep::comm::BarrierOptions& opts = {})         \
      override;                                                                                              \
  std::shared_ptr<::lockstep::comm::Work> send(const void* data, size_t count, ::lockstep::DType dtype,      \
                                               int dst, const ::lockstep::comm::SendRecvOptions& opts = {})  \
      override;                                                                                              \
  std::shared_ptr<::lockstep::comm::Work> recv(void* data, size_t count, ::lockstep::DType dtype, int src,   \
                                               const ::lockstep::comm::SendRecvOptions& opts = {}) override;

class ProcessGroup {
 public:
  /// Starts the worker thread. Not collective by itself (backends' constructors usually are).
  ProcessGroup(int rank, int size);
  /// Drains queued ops, then stops the worker thread. Backends must call stopWorker() first in
  /// their destructors so no op runs against a half-destroyed backend.
  virtual ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  /// The name this backend is registered under (backend_registry.h): "shm", "gloo", "mpi", "auto".
  virtual std::string backendName() const = 0;
  /// Timeout of ops whose options say kGroupTimeout. Set before issuing ops.
  void setTimeout(std::chrono::milliseconds t) { timeout_ = t; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  /// Number of collectives issued so far (the last collective sequence number).
  uint64_t sequenceNumber() const { return seq_; }

  /// In place: data (count elements on every rank) becomes op over all ranks' data. Collective.
  virtual std::shared_ptr<Work> allreduce(void* data, size_t count, DType dtype,
                                          const AllreduceOptions& opts = {});
  /// data of root is copied into data of every rank. Collective.
  virtual std::shared_ptr<Work> broadcast(void* data, size_t count, DType dtype,
                                          const BroadcastOptions& opts = {});
  /// In place: root's data becomes op over all ranks' data; other ranks' data is unspecified
  /// afterwards (it may hold partial or full results). Collective.
  virtual std::shared_ptr<Work> reduce(void* data, size_t count, DType dtype, const ReduceOptions& opts = {});
  /// out (size() * count elements) receives every rank's in (count elements), in rank order.
  virtual std::shared_ptr<Work> allgather(const void* in, void* out, size_t count, DType dtype,
                                          const AllgatherOptions& opts = {});
  /// Uneven allgather: rank r contributes counts[r] elements (in holds counts[rank()]); out holds
  /// sum(counts) elements, rank order. counts must be equal on every rank. Collective.
  virtual std::shared_ptr<Work> allgatherv(const void* in, void* out, const std::vector<size_t>& counts,
                                           DType dtype, const AllgatherOptions& opts = {});
  /// in holds size() * count elements; out (count elements) receives block rank() of the
  /// reduction over all ranks' in. Collective.
  virtual std::shared_ptr<Work> reduceScatter(const void* in, void* out, size_t count, DType dtype,
                                              const ReduceScatterOptions& opts = {});
  /// root's out (size() * count elements) receives every rank's in; out is ignored elsewhere
  /// (may be nullptr). Collective.
  virtual std::shared_ptr<Work> gather(const void* in, void* out, size_t count, DType dtype,
                                       const GatherOptions& opts = {});
  /// Block r of root's in (size() * count elements) goes to rank r's out; in is ignored on other
  /// ranks (may be nullptr). Collective.
  virtual std::shared_ptr<Work> scatter(const void* in, void* out, size_t count, DType dtype,
                                        const ScatterOptions& opts = {});
  /// Block j of rank i's in goes to block i of rank j's out; both hold size() * count. Collective.
  virtual std::shared_ptr<Work> alltoall(const void* in, void* out, size_t count, DType dtype,
                                         const AlltoallOptions& opts = {});
  /// Completes once every rank issued it. Collective.
  virtual std::shared_ptr<Work> barrier(const BarrierOptions& opts = {});
  /// Point to point: count elements to rank dst, matched by a recv with the same tag. Not
  /// collective; ordered with this group's other ops.
  virtual std::shared_ptr<Work> send(const void* data, size_t count, DType dtype, int dst,
                                     const SendRecvOptions& opts = {});
  virtual std::shared_ptr<Work> recv(void* data, size_t count, DType dtype, int src,
                                     const SendRecvOptions& opts = {});
  /// A group of the given ranks of this group (sorted, unique), numbered 0.. in that order.
  /// Collective over this whole group: every rank calls it with the same list; ranks outside
  /// the list get nullptr.
  virtual std::shared_ptr<ProcessGroup> newGroup(const std::vector<int>& ranks);

 protected:
  /// newGroup's members: ranks sorted, each a rank of this group once (ValueError otherwise), and
  /// this rank's place among them (-1 when it is not one of them).
  struct Subgroup {
    std::vector<int> ranks;
    int rank = -1;
  };
  Subgroup subgroup(const std::vector<int>& ranks) const;

  using OpBody = std::function<void(const OpContext&)>;
  /// Validates nothing; numbers the op and queues body on the worker thread.
  /// defer: see AllreduceOptions::defer.
  std::shared_ptr<Work> enqueue(OpType type, const std::string& detail, std::chrono::milliseconds timeout,
                                OpBody body, bool defer = false);
  /// As enqueue, for a body that does not block (posting a send or receive whose transfer goes on
  /// elsewhere): it runs on this thread at once when the group has no op queued or running, else
  /// after them on the worker. Either way in issue order; the common case hands nothing to the
  /// worker thread, which on a rank with one core would wait for the compute to yield it.
  std::shared_ptr<Work> enqueueOrRun(OpType type, const std::string& detail,
                                     std::chrono::milliseconds timeout, OpBody body);
  /// Numbers and names an op as enqueue does (timeout resolved against the group's), for
  /// backends that run ops elsewhere than the worker thread (nccl: on a CUDA stream).
  OpContext nextOp(OpType type, std::chrono::milliseconds timeout);
  /// The Work description of ctx: "allreduce #7 (nccl, rank 0/2, detail)".
  std::string describe(const OpContext& ctx, const std::string& detail) const;
  /// Runs queued ops to completion and joins the worker. Idempotent.
  void stopWorker();
  [[noreturn]] void notSupported(const char* what) const;
  void checkRoot(int root, const char* what) const;
  void checkPeer(int peer, const char* what) const;
  /// ValueError unless place is host memory: for backends that move host memory only.
  void checkHostBuffers(const BufferPlace& place, const char* what) const;

 private:
  struct Item {
    std::shared_ptr<Work> work;
    OpContext ctx;
    OpBody body;
  };
  // The queue, shared with Works (through weak_ptr) so Work::wait can run queued ops inline.
  struct Executor {
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<Item> queue;
    bool busy = false;  // an op is running (on the worker or on a waiting thread)
    bool stop = false;
    std::string broken;  // first error; later ops fail with it
    void runOne(Item& item);
    void helpUntil(const Work& work);  // runs queued ops on this thread until work is done or another runs
    void wake();                       // makes the worker run what is queued (deferred ops)
  };
  void workerLoop();
  // A numbered op's Work, whose wait() runs queued ops inline (Executor::helpUntil).
  std::shared_ptr<Work> makeWork(const OpContext& ctx, const std::string& detail);

  int rank_;
  int size_;
  std::chrono::milliseconds timeout_ = kDefaultCollectiveTimeout;
  uint64_t seq_ = 0;      // collectives issued
  uint64_t p2p_seq_ = 0;  // sends and recvs issued
  std::shared_ptr<Executor> executor_ = std::make_shared<Executor>();
  std::thread worker_;
};

}  // namespace lockstep::comm
