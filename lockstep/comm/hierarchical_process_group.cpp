#include "lockstep/comm/hierarchical_process_group.h"

#include <unistd.h>

#include <algorithm>

#include "lockstep/comm/store/prefix_store.h"
#include "lockstep/util/env.h"
#include "lockstep/util/error.h"

namespace lockstep::comm {

using ::lockstep::detail::concat;

std::vector<std::string> exchangeHostIds(Store& store, int rank, int size, std::string host_id) {
  if (host_id.empty()) host_id = env::get("LOCKSTEP_HOST_ID").value_or("");
  if (host_id.empty()) {
    char buf[256] = {};
    ::gethostname(buf, sizeof(buf) - 1);
    host_id = buf;
  }
  store.setString("host/" + std::to_string(rank), host_id);
  std::vector<std::string> ids(size);
  for (int j = 0; j < size; ++j) ids[j] = store.getString("host/" + std::to_string(j));
  return ids;
}

HierarchicalProcessGroup::HierarchicalProcessGroup(std::shared_ptr<Store> store, int rank, int size,
                                                   const std::vector<std::string>& host_ids,
                                                   const HierarchicalOptions& options)
    : ProcessGroup(rank, size) {
  setTimeout(options.timeout);
  LOCKSTEP_ENFORCE(host_ids.size() == static_cast<size_t>(size), ValueError,
                   "auto backend: ", host_ids.size(), " host ids for ", size, " ranks");
  std::vector<std::string> hosts;  // in order of first rank
  for (const auto& h : host_ids) {
    if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) hosts.push_back(h);
  }
  num_hosts_ = static_cast<int>(hosts.size());
  const int my_host = static_cast<int>(std::find(hosts.begin(), hosts.end(), host_ids[rank]) - hosts.begin());
  int local_rank = 0, local_size = 0;
  for (int j = 0; j < size; ++j) {
    if (host_ids[j] != host_ids[rank]) continue;
    if (j < rank) ++local_rank;
    ++local_size;
  }
  ShmOptions shm = options.shm;
  shm.timeout = options.timeout;
  GlooOptions gloo = options.gloo;
  gloo.timeout = options.timeout;
  local_ = std::make_unique<ShmProcessGroup>(
      std::make_shared<PrefixStore>("local" + std::to_string(my_host), store), local_rank, local_size, shm);
  if (local_rank == 0) {
    leaders_ = std::make_unique<GlooProcessGroup>(std::make_shared<PrefixStore>("leaders", store), my_host,
                                                  num_hosts_, gloo);
  }
  flat_ = std::make_unique<GlooProcessGroup>(std::make_shared<PrefixStore>("flat", store), rank, size, gloo);
}

HierarchicalProcessGroup::~HierarchicalProcessGroup() { stopWorker(); }

namespace {
std::chrono::milliseconds remaining(const OpContext& ctx) {
  auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(ctx.deadline - std::chrono::steady_clock::now());
  return std::max(ms, std::chrono::milliseconds(1));
}
}  // namespace

void HierarchicalProcessGroup::hierarchicalReduce(const OpContext& ctx, void* data, size_t count, DType dtype,
                                                  ReduceOp op, bool all) {
  const ReduceOp inner = op == ReduceOp::avg ? ReduceOp::sum : op;
  const char* stage = "reduce inside the host (shm)";
  try {
    local_->reduce(data, count, dtype, {.op = inner, .root = 0, .timeout = remaining(ctx)})->wait();
    if (leaders_) {
      stage = "allreduce among host leaders (gloo)";
      leaders_->allreduce(data, count, dtype, {.op = inner, .timeout = remaining(ctx)})->wait();
    }
    if (all) {
      stage = "broadcast inside the host (shm)";
      local_->broadcast(data, count, dtype, {.root = 0, .timeout = remaining(ctx)})->wait();
    }
  } catch (const TimeoutError& e) {
    throw TimeoutError(concat(ctx.name, " (auto, rank ", rank(), ") failed in the ", stage, ": ", e.what()));
  } catch (const Error& e) {
    throw PeerError(concat(ctx.name, " (auto, rank ", rank(), ") failed in the ", stage, ": ", e.what()));
  }
  if (op == ReduceOp::avg && (all || leaders_)) divideBy(data, count, dtype, size());
}

std::shared_ptr<Work> HierarchicalProcessGroup::allreduce(void* data, size_t count, DType dtype,
                                                          const AllreduceOptions& o) {
  checkHostBuffers(o.place, "allreduce");
  return enqueue(
      OpType::allreduce, concat(count, " x ", dtypeName(dtype)), o.timeout,
      [=, this](const OpContext& ctx) { hierarchicalReduce(ctx, data, count, dtype, o.op, true); }, o.defer);
}

std::shared_ptr<Work> HierarchicalProcessGroup::reduce(void* data, size_t count, DType dtype,
                                                       const ReduceOptions& o) {
  checkHostBuffers(o.place, "reduce");
  checkRoot(o.root, "reduce");
  if (o.root != 0) {  // the hierarchy reduces to rank 0 (a leader); other roots go flat
    return viaFlat(OpType::reduce, o.timeout, [=](ProcessGroup& g, std::chrono::milliseconds t) {
      ReduceOptions r = o;
      r.timeout = t;
      return g.reduce(data, count, dtype, r);
    });
  }
  return enqueue(
      OpType::reduce, concat(count, " x ", dtypeName(dtype)), o.timeout,
      [=, this](const OpContext& ctx) { hierarchicalReduce(ctx, data, count, dtype, o.op, false); });
}

std::shared_ptr<Work> HierarchicalProcessGroup::viaFlat(
    OpType type, std::chrono::milliseconds timeout,
    std::function<std::shared_ptr<Work>(ProcessGroup&, std::chrono::milliseconds)> op) {
  return enqueue(type, "", timeout, [this, op](const OpContext& ctx) { op(*flat_, remaining(ctx))->wait(); });
}

std::shared_ptr<Work> HierarchicalProcessGroup::broadcast(void* data, size_t count, DType dtype,
                                                          const BroadcastOptions& o) {
  checkHostBuffers(o.place, "broadcast");
  checkRoot(o.root, "broadcast");
  return viaFlat(OpType::broadcast, o.timeout, [=](ProcessGroup& g, std::chrono::milliseconds t) {
    return g.broadcast(data, count, dtype, {.root = o.root, .timeout = t});
  });
}

std::shared_ptr<Work> HierarchicalProcessGroup::allgather(const void* in, void* out, size_t count,
                                                          DType dtype, const AllgatherOptions& o) {
  checkHostBuffers(o.place, "allgather");
  return viaFlat(OpType::allgather, o.timeout, [=](ProcessGroup& g, std::chrono::milliseconds t) {
    return g.allgather(in, out, count, dtype, {.timeout = t});
  });
}

std::shared_ptr<Work> HierarchicalProcessGroup::allgatherv(const void* in, void* out,
                                                           const std::vector<size_t>& counts, DType dtype,
                                                           const AllgatherOptions& o) {
  checkHostBuffers(o.place, "allgatherv");
  LOCKSTEP_ENFORCE(counts.size() == static_cast<size_t>(size()), ValueError, "allgatherv: counts has ",
                   counts.size(), " entries but the group has ", size(), " ranks");
  return viaFlat(OpType::allgatherv, o.timeout, [=](ProcessGroup& g, std::chrono::milliseconds t) {
    return g.allgatherv(in, out, counts, dtype, {.timeout = t});
  });
}

std::shared_ptr<Work> HierarchicalProcessGroup::reduceScatter(const void* in, void* out, size_t count,
                                                              DType dtype, const ReduceScatterOptions& o) {
  checkHostBuffers(o.place, "reduce_scatter");
  return viaFlat(OpType::reduceScatter, o.timeout, [=](ProcessGroup& g, std::chrono::milliseconds t) {
    return g.reduceScatter(in, out, count, dtype, {.op = o.op, .timeout = t});
  });
}

std::shared_ptr<Work> HierarchicalProcessGroup::gather(const void* in, void* out, size_t count, DType dtype,
                                                       const GatherOptions& o) {
  checkHostBuffers(o.place, "gather");
  checkRoot(o.root, "gather");
  return viaFlat(OpType::gather, o.timeout, [=](ProcessGroup& g, std::chrono::milliseconds t) {
    return g.gather(in, out, count, dtype, {.root = o.root, .timeout = t});
  });
}

std::shared_ptr<Work> HierarchicalProcessGroup::scatter(const void* in, void* out, size_t count, DType dtype,
                                                        const ScatterOptions& o) {
  checkHostBuffers(o.place, "scatter");
  checkRoot(o.root, "scatter");
  return viaFlat(OpType::scatter, o.timeout, [=](ProcessGroup& g, std::chrono::milliseconds t) {
    return g.scatter(in, out, count, dtype, {.root = o.root, .timeout = t});
  });
}

std::shared_ptr<Work> HierarchicalProcessGroup::alltoall(const void* in, void* out, size_t count, DType dtype,
                                                         const AlltoallOptions& o) {
  checkHostBuffers(o.place, "alltoall");
  return viaFlat(OpType::alltoall, o.timeout, [=](ProcessGroup& g, std::chrono::milliseconds t) {
    return g.alltoall(in, out, count, dtype, {.timeout = t});
  });
}

std::shared_ptr<Work> HierarchicalProcessGroup::barrier(const BarrierOptions& o) {
  return viaFlat(OpType::barrier, o.timeout,
                 [=](ProcessGroup& g, std::chrono::milliseconds t) { return g.barrier({.timeout = t}); });
}

std::shared_ptr<Work> HierarchicalProcessGroup::send(const void* data, size_t count, DType dtype, int dst,
                                                     const SendRecvOptions& o) {
  checkHostBuffers(o.place, "send");
  checkPeer(dst, "send");
  return viaFlat(OpType::send, o.timeout, [=](ProcessGroup& g, std::chrono::milliseconds t) {
    return g.send(data, count, dtype, dst, {.tag = o.tag, .timeout = t});
  });
}

std::shared_ptr<Work> HierarchicalProcessGroup::recv(void* data, size_t count, DType dtype, int src,
                                                     const SendRecvOptions& o) {
  checkHostBuffers(o.place, "recv");
  checkPeer(src, "recv");
  return viaFlat(OpType::recv, o.timeout, [=](ProcessGroup& g, std::chrono::milliseconds t) {
    return g.recv(data, count, dtype, src, {.tag = o.tag, .timeout = t});
  });
}

}  // namespace lockstep::comm
