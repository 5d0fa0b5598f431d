#include "lockstep/comm/mpi/mpi_process_group.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "lockstep/util/error.h"

namespace lockstep::comm {

using ::lockstep::detail::concat;

namespace {

struct Desc {
  uint64_t seq, count;
  int32_t root;
  uint8_t type, dtype, op, pad;
  bool operator==(const Desc&) const = default;
};

// An op of this process timed out: its request is still pending, and MPI_Finalize would wait for
// it (for ranks that may never come) instead of letting the process end. The process then exits
// without finalizing, and mpirun, seeing a rank gone, ends the job.
std::atomic<bool> g_abandoned_request{false};

void ensureMpiInit() {
  static std::once_flag once;
  std::call_once(once, [] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
      LOCKSTEP_ENFORCE(rc == MPI_SUCCESS, PeerError, "mpi backend: MPI_Init_thread failed (code ", rc,
                       "); start the job with mpirun or srun");
      LOCKSTEP_ENFORCE(provided >= MPI_THREAD_SERIALIZED, NotSupportedError,
                       "mpi backend: the MPI library provides thread level ", provided,
                       ", but lockstep calls MPI from a worker thread and needs MPI_THREAD_SERIALIZED");
      std::atexit([] {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized && !g_abandoned_request.load()) MPI_Finalize();
      });
    }
  });
}

MPI_Datatype mpiType(DType t) {
  switch (t) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::i32:
      return MPI_INT32_T;
    case DType::i64:
      return MPI_INT64_T;
    case DType::u8:
      return MPI_UINT8_T;
    case DType::bf16:
    case DType::f16:
      return MPI_UINT16_T;
  }
  return MPI_BYTE;
}

template <DType D, ReduceOp O>
void userOp(void* in, void* inout, int* len, MPI_Datatype*) {
  reduceInto(inout, inout, in, static_cast<size_t>(*len), D, O);
}

template <DType D>
MPI_Op halfOp(ReduceOp op) {
  static MPI_Op ops[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  static std::once_flag once;
  std::call_once(once, [] {
    MPI_Op_create(&userOp<D, ReduceOp::sum>, 1, &ops[0]);
    MPI_Op_create(&userOp<D, ReduceOp::min>, 1, &ops[1]);
    MPI_Op_create(&userOp<D, ReduceOp::max>, 1, &ops[2]);
    MPI_Op_create(&userOp<D, ReduceOp::product>, 1, &ops[3]);
  });
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return ops[0];
    case ReduceOp::min:
      return ops[1];
    case ReduceOp::max:
      return ops[2];
    case ReduceOp::product:
      return ops[3];
  }
  return ops[0];
}

MPI_Op mpiOp(ReduceOp op, DType t) {
  if (t == DType::bf16) return halfOp<DType::bf16>(op);
  if (t == DType::f16) return halfOp<DType::f16>(op);
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return MPI_SUM;
    case ReduceOp::min:
      return MPI_MIN;
    case ReduceOp::max:
      return MPI_MAX;
    case ReduceOp::product:
      return MPI_PROD;
  }
  return MPI_SUM;
}

int toInt(size_t n, const char* what) {
  LOCKSTEP_ENFORCE(n <= static_cast<size_t>(INT_MAX), ValueError, "mpi backend: ", what, " of ", n,
                   " elements exceeds MPI's int count limit");
  return static_cast<int>(n);
}

void check(int rc, const char* call, const OpContext& ctx) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw PeerError(concat(ctx.name, ": ", call, " failed: ", msg));
}

}  // namespace

std::shared_ptr<MpiProcessGroup> MpiProcessGroup::createWorld(const MpiOptions& options) {
  ensureMpiInit();
  return std::make_shared<MpiProcessGroup>(MPI_COMM_WORLD, options);
}

namespace {
int commRank(MPI_Comm c) {
  ensureMpiInit();
  int r = 0;
  MPI_Comm_rank(c, &r);
  return r;
}
int commSize(MPI_Comm c) {
  int s = 1;
  MPI_Comm_size(c, &s);
  return s;
}
}  // namespace

MpiProcessGroup::MpiProcessGroup(MPI_Comm comm, const MpiOptions& options)
    : ProcessGroup(commRank(comm), commSize(comm)), comm_(comm), options_(options) {
  setTimeout(options.timeout);
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
}

MpiProcessGroup::~MpiProcessGroup() {
  stopWorker();
  if (comm_ != MPI_COMM_WORLD && !g_abandoned_request.load()) MPI_Comm_free(&comm_);
}

void MpiProcessGroup::waitRequest(const OpContext& ctx, MPI_Request* req, const char* call) {
  int spins = 0;
  auto pause = std::chrono::microseconds(20);
  while (true) {
    int done = 0;
    check(MPI_Test(req, &done, MPI_STATUS_IGNORE), call, ctx);
    if (done) return;
    if (++spins < 2000) {
      std::this_thread::yield();
      continue;
    }
    if (std::chrono::steady_clock::now() >= ctx.deadline) {
      g_abandoned_request = true;
      throw TimeoutError(concat(ctx.name, " timed out after ", ctx.timeout.count(), " ms on rank ", rank(),
                                " in ", call,
                                ": some ranks did not arrive (MPI cannot say which; "
                                "they are stuck or issued fewer collectives)"));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

template <typename Start>
void MpiProcessGroup::run(const OpContext& ctx, DType dtype, size_t count, int root, ReduceOp op,
                          Start start) {
  if (size() > 1 && ctx.type != OpType::send && ctx.type != OpType::recv) {
    Desc mine{ctx.seq,
              count,
              root,
              static_cast<uint8_t>(ctx.type),
              static_cast<uint8_t>(dtype),
              static_cast<uint8_t>(op),
              0};
    std::vector<Desc> all(size());
    MPI_Request req;
    check(MPI_Iallgather(&mine, sizeof(Desc), MPI_BYTE, all.data(), sizeof(Desc), MPI_BYTE, comm_, &req),
          "MPI_Iallgather", ctx);
    waitRequest(ctx, &req, "the op check (MPI_Iallgather)");
    for (int j = 0; j < size(); ++j) {
      if (all[j] == mine) continue;
      throw PeerError(concat(ctx.name, ": ranks issued different collectives in the same slot: rank ", rank(),
                             " issued ", opTypeName(ctx.type), " #", ctx.seq, " (count ", count,
                             ") but rank ", j, " issued ", opTypeName(static_cast<OpType>(all[j].type)), " #",
                             all[j].seq, " (count ", all[j].count,
                             "); every rank must issue the same collectives in the same order"));
    }
  }
  MPI_Request req = MPI_REQUEST_NULL;
  const char* call = start(&req);
  if (req != MPI_REQUEST_NULL) waitRequest(ctx, &req, call);
}

#define LOCKSTEP_MPI_OP(TYPE, DETAIL, TIMEOUT, DTYPE, COUNT, ROOT, OP, ...)                 \
  enqueue(TYPE, DETAIL, TIMEOUT, [=, this](const OpContext& ctx) {                          \
    run(ctx, DTYPE, COUNT, ROOT, OP, [&](MPI_Request* req) -> const char* { __VA_ARGS__ }); \
  })

std::shared_ptr<Work> MpiProcessGroup::allreduce(void* data, size_t count, DType dtype,
                                                 const AllreduceOptions& o) {
  checkHostBuffers(o.place, "allreduce");
  int n = toInt(count, "allreduce");
  return enqueue(
      OpType::allreduce, concat(count, " x ", dtypeName(dtype)), o.timeout,
      [=, this](const OpContext& ctx) {
        run(ctx, dtype, count, -1, o.op, [&](MPI_Request* req) -> const char* {
          check(MPI_Iallreduce(MPI_IN_PLACE, data, n, mpiType(dtype), mpiOp(o.op, dtype), comm_, req),
                "MPI_Iallreduce", ctx);
          return "MPI_Iallreduce";
        });
        if (o.op == ReduceOp::avg) divideBy(data, count, dtype, size());
      },
      o.defer);
}

std::shared_ptr<Work> MpiProcessGroup::reduce(void* data, size_t count, DType dtype, const ReduceOptions& o) {
  checkHostBuffers(o.place, "reduce");
  checkRoot(o.root, "reduce");
  int n = toInt(count, "reduce");
  return enqueue(OpType::reduce, concat(count, " x ", dtypeName(dtype)), o.timeout,
                 [=, this](const OpContext& ctx) {
                   bool root = rank() == o.root;
                   run(ctx, dtype, count, o.root, o.op, [&](MPI_Request* req) -> const char* {
                     check(MPI_Ireduce(root ? MPI_IN_PLACE : data, root ? data : nullptr, n, mpiType(dtype),
                                       mpiOp(o.op, dtype), o.root, comm_, req),
                           "MPI_Ireduce", ctx);
                     return "MPI_Ireduce";
                   });
                   if (o.op == ReduceOp::avg && root) divideBy(data, count, dtype, size());
                 });
}

std::shared_ptr<Work> MpiProcessGroup::reduceScatter(const void* in, void* out, size_t count, DType dtype,
                                                     const ReduceScatterOptions& o) {
  checkHostBuffers(o.place, "reduce_scatter");
  int n = toInt(count * size(), "reduce_scatter");
  return enqueue(OpType::reduceScatter, concat(count, " x ", dtypeName(dtype)), o.timeout,
                 [=, this](const OpContext& ctx) {
                   run(ctx, dtype, count, -1, o.op, [&](MPI_Request* req) -> const char* {
                     if (n == 0) return "MPI_Ireduce_scatter_block";
                     check(MPI_Ireduce_scatter_block(in, out, static_cast<int>(count), mpiType(dtype),
                                                     mpiOp(o.op, dtype), comm_, req),
                           "MPI_Ireduce_scatter_block", ctx);
                     return "MPI_Ireduce_scatter_block";
                   });
                   if (o.op == ReduceOp::avg) divideBy(out, count, dtype, size());
                 });
}

std::shared_ptr<Work> MpiProcessGroup::broadcast(void* data, size_t count, DType dtype,
                                                 const BroadcastOptions& o) {
  checkHostBuffers(o.place, "broadcast");
  checkRoot(o.root, "broadcast");
  int n = toInt(count, "broadcast");
  return LOCKSTEP_MPI_OP(OpType::broadcast, concat(count, " x ", dtypeName(dtype)), o.timeout, dtype, count,
                         o.root, ReduceOp::sum, {
                           check(MPI_Ibcast(data, n, mpiType(dtype), o.root, comm_, req), "MPI_Ibcast", ctx);
                           return "MPI_Ibcast";
                         });
}

std::shared_ptr<Work> MpiProcessGroup::allgather(const void* in, void* out, size_t count, DType dtype,
                                                 const AllgatherOptions& o) {
  checkHostBuffers(o.place, "allgather");
  int n = toInt(count * size(), "allgather");
  (void)n;
  return LOCKSTEP_MPI_OP(OpType::allgather, concat(count, " x ", dtypeName(dtype)), o.timeout, dtype, count,
                         -1, ReduceOp::sum, {
                           check(MPI_Iallgather(in, static_cast<int>(count), mpiType(dtype), out,
                                                static_cast<int>(count), mpiType(dtype), comm_, req),
                                 "MPI_Iallgather", ctx);
                           return "MPI_Iallgather";
                         });
}

std::shared_ptr<Work> MpiProcessGroup::allgatherv(const void* in, void* out,
                                                  const std::vector<size_t>& counts, DType dtype,
                                                  const AllgatherOptions& o) {
  checkHostBuffers(o.place, "allgatherv");
  LOCKSTEP_ENFORCE(counts.size() == static_cast<size_t>(size()), ValueError, "allgatherv: counts has ",
                   counts.size(), " entries but the group has ", size(), " ranks");
  std::vector<int> icounts(size()), displs(size());
  size_t total = 0;
  for (int j = 0; j < size(); ++j) {
    icounts[j] = toInt(counts[j], "allgatherv");
    displs[j] = toInt(total, "allgatherv");
    total += counts[j];
  }
  return LOCKSTEP_MPI_OP(OpType::allgatherv, concat(counts[rank()], " x ", dtypeName(dtype)), o.timeout,
                         dtype, total, -1, ReduceOp::sum, {
                           check(MPI_Iallgatherv(in, icounts[rank()], mpiType(dtype), out, icounts.data(),
                                                 displs.data(), mpiType(dtype), comm_, req),
                                 "MPI_Iallgatherv", ctx);
                           return "MPI_Iallgatherv";
                         });
}

std::shared_ptr<Work> MpiProcessGroup::gather(const void* in, void* out, size_t count, DType dtype,
                                              const GatherOptions& o) {
  checkHostBuffers(o.place, "gather");
  checkRoot(o.root, "gather");
  toInt(count * size(), "gather");
  return LOCKSTEP_MPI_OP(OpType::gather, concat(count, " x ", dtypeName(dtype)), o.timeout, dtype, count,
                         o.root, ReduceOp::sum, {
                           check(MPI_Igather(in, static_cast<int>(count), mpiType(dtype), out,
                                             static_cast<int>(count), mpiType(dtype), o.root, comm_, req),
                                 "MPI_Igather", ctx);
                           return "MPI_Igather";
                         });
}

std::shared_ptr<Work> MpiProcessGroup::scatter(const void* in, void* out, size_t count, DType dtype,
                                               const ScatterOptions& o) {
  checkHostBuffers(o.place, "scatter");
  checkRoot(o.root, "scatter");
  toInt(count * size(), "scatter");
  return LOCKSTEP_MPI_OP(OpType::scatter, concat(count, " x ", dtypeName(dtype)), o.timeout, dtype, count,
                         o.root, ReduceOp::sum, {
                           check(MPI_Iscatter(in, static_cast<int>(count), mpiType(dtype), out,
                                              static_cast<int>(count), mpiType(dtype), o.root, comm_, req),
                                 "MPI_Iscatter", ctx);
                           return "MPI_Iscatter";
                         });
}

std::shared_ptr<Work> MpiProcessGroup::alltoall(const void* in, void* out, size_t count, DType dtype,
                                                const AlltoallOptions& o) {
  checkHostBuffers(o.place, "alltoall");
  toInt(count * size(), "alltoall");
  return LOCKSTEP_MPI_OP(OpType::alltoall, concat(count, " x ", dtypeName(dtype)), o.timeout, dtype, count,
                         -1, ReduceOp::sum, {
                           check(MPI_Ialltoall(in, static_cast<int>(count), mpiType(dtype), out,
                                               static_cast<int>(count), mpiType(dtype), comm_, req),
                                 "MPI_Ialltoall", ctx);
                           return "MPI_Ialltoall";
                         });
}

std::shared_ptr<Work> MpiProcessGroup::barrier(const BarrierOptions& o) {
  return LOCKSTEP_MPI_OP(OpType::barrier, "", o.timeout, DType::u8, 0, -1, ReduceOp::sum, {
    check(MPI_Ibarrier(comm_, req), "MPI_Ibarrier", ctx);
    return "MPI_Ibarrier";
  });
}

std::shared_ptr<Work> MpiProcessGroup::send(const void* data, size_t count, DType dtype, int dst,
                                            const SendRecvOptions& o) {
  checkHostBuffers(o.place, "send");
  checkPeer(dst, "send");
  int n = toInt(count, "send");
  return LOCKSTEP_MPI_OP(OpType::send, concat(count, " x ", dtypeName(dtype), " to rank ", dst), o.timeout,
                         dtype, count, dst, ReduceOp::sum, {
                           check(MPI_Isend(data, n, mpiType(dtype), dst, o.tag, comm_, req), "MPI_Isend",
                                 ctx);
                           return "MPI_Isend";
                         });
}

std::shared_ptr<Work> MpiProcessGroup::recv(void* data, size_t count, DType dtype, int src,
                                            const SendRecvOptions& o) {
  checkHostBuffers(o.place, "recv");
  checkPeer(src, "recv");
  int n = toInt(count, "recv");
  return LOCKSTEP_MPI_OP(OpType::recv, concat(count, " x ", dtypeName(dtype), " from rank ", src), o.timeout,
                         dtype, count, src, ReduceOp::sum, {
                           check(MPI_Irecv(data, n, mpiType(dtype), src, o.tag, comm_, req), "MPI_Irecv",
                                 ctx);
                           return "MPI_Irecv";
                         });
}

std::shared_ptr<ProcessGroup> MpiProcessGroup::newGroup(const std::vector<int>& ranks) {
  const bool member = subgroup(ranks).rank >= 0;
  // Drain this group's queue first: MPI_Comm_split is collective on comm_ and must not interleave
  // with queued ops on the worker thread.
  barrier()->wait();
  MPI_Comm sub = MPI_COMM_NULL;
  int rc = MPI_Comm_split(comm_, member ? 0 : MPI_UNDEFINED, rank(), &sub);
  LOCKSTEP_ENFORCE(rc == MPI_SUCCESS, PeerError, "mpi backend: MPI_Comm_split failed (code ", rc, ")");
  if (!member) return nullptr;
  return std::make_shared<MpiProcessGroup>(sub, options_);
}

}  // namespace lockstep::comm
