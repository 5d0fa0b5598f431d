#include "lockstep/comm/gloo/gloo_process_group.h"

#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/gather.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/scatter.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "lockstep/comm/gloo/gloo_op_check.h"
#include "lockstep/comm/gloo/gloo_reduce_scatter.h"
#include "lockstep/comm/gloo/gloo_store_adapter.h"
#include "lockstep/comm/group_arrival.h"
#include "lockstep/comm/op_watch.h"
#include "lockstep/comm/store/prefix_store.h"
#include "lockstep/util/env.h"
#include "lockstep/util/error.h"

namespace lockstep::comm {

using gloo_detail::exchangeOpDescs;
using gloo_detail::GlooOpDesc;
using gloo_detail::remaining;
using ::lockstep::detail::concat;

namespace {

constexpr uint8_t kP2PSlotPrefix = 0xf1;

std::string defaultHostname() {
  if (auto h = env::get("LOCKSTEP_GLOO_HOSTNAME")) return *h;
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "127.0.0.1";
  return buf;
}

template <typename Fn>
void withType(DType dtype, Fn&& fn) {
  visitDType(dtype, [&](auto tag) { fn(static_cast<decltype(tag)*>(nullptr)); });
}

}  // namespace

GlooProcessGroup::GlooProcessGroup(std::shared_ptr<Store> store, int rank, int size,
                                   const GlooOptions& options)
    : ProcessGroup(rank, size), store_(std::move(store)), options_(options) {
  setTimeout(options.timeout);
  if (options_.hostname.empty()) options_.hostname = defaultHostname();
  // Gloo's own rendezvous names no missing rank: the ranks meet first, within the group's timeout.
  awaitGroupArrival(*store_, "gloo/arrived", "gloo", rank, size, options_.timeout);
  ::gloo::transport::tcp::attr attr;
  attr.hostname = options_.hostname;
  try {
    auto device = ::gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<::gloo::rendezvous::Context>(rank, size);
    context->setTimeout(options_.timeout);
    GlooStoreAdapter adapter(store_);
    context->connectFullMesh(adapter, device);
    context_ = context;
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw PeerError(concat("gloo backend: rank ", rank, " of ", size, " could not connect to its peers (",
                           "listening on '", options_.hostname, "'): ", e.what(),
                           "; check that every host can reach the others (set LOCKSTEP_GLOO_HOSTNAME "
                           "to a reachable address of this host)"));
  }
}

GlooProcessGroup::~GlooProcessGroup() { stopWorker(); }

template <typename Body>
void GlooProcessGroup::run(const OpContext& ctx, DType dtype, size_t count, int root, ReduceOp op,
                           Body body) {
  try {
    if (options_.check_ops && size() > 1 && ctx.type != OpType::send && ctx.type != OpType::recv) {
      GlooOpDesc d;
      d.seq = ctx.seq;
      d.count = count;
      d.root = root;
      d.type = static_cast<uint8_t>(ctx.type);
      d.dtype = static_cast<uint8_t>(dtype);
      d.op = static_cast<uint8_t>(op);
      exchangeOpDescs(*context_, ctx, d);
    }
    body();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    std::string m = e.what();
    if (m.find("Timed out") != std::string::npos) {
      throw TimeoutError(concat(ctx.name, " timed out after ", ctx.timeout.count(), " ms on rank ", rank(),
                                " during the data exchange (all ranks had arrived; a peer "
                                "stalled): ",
                                m));
    }
    throw PeerError(concat(ctx.name, " failed on rank ", rank(),
                           ": a peer connection broke during the data exchange (did a rank die?): ", m));
  }
}

#define LOCKSTEP_GLOO_OP(TYPE, DETAIL, TIMEOUT, DTYPE, COUNT, ROOT, OP, ...) \
  enqueue(TYPE, DETAIL, TIMEOUT,                                             \
          [=, this](const OpContext& ctx) { run(ctx, DTYPE, COUNT, ROOT, OP, [&] { __VA_ARGS__; }); })

void GlooProcessGroup::runAllreduce(const OpContext& ctx, void* data, size_t count, DType dtype,
                                    ReduceOp op) {
  if (count == 0) return;
  withType(dtype, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    ::gloo::AllreduceOptions o(context_);
    o.setOutput(static_cast<T*>(data), count);
    o.setReduceFunction(
        [dtype, op](void* c, const void* a, const void* b, size_t n) { reduceInto(c, a, b, n, dtype, op); });
    o.setTag(static_cast<uint32_t>(ctx.seq));
    o.setTimeout(remaining(ctx));
    ::gloo::allreduce(o);
  });
  if (op == ReduceOp::avg) divideBy(data, count, dtype, size());
}

std::shared_ptr<Work> GlooProcessGroup::allreduce(void* data, size_t count, DType dtype,
                                                  const AllreduceOptions& o) {
  checkHostBuffers(o.place, "allreduce");
  return enqueue(
      OpType::allreduce, concat(count, " x ", dtypeName(dtype)), o.timeout,
      [=, this](const OpContext& ctx) {
        run(ctx, dtype, count, -1, o.op, [&] { runAllreduce(ctx, data, count, dtype, o.op); });
      },
      o.defer);
}

std::shared_ptr<Work> GlooProcessGroup::reduceScatter(const void* in, void* out, size_t count, DType dtype,
                                                      const ReduceScatterOptions& o) {
  checkHostBuffers(o.place, "reduce_scatter");
  return LOCKSTEP_GLOO_OP(
      OpType::reduceScatter, concat(count, " x ", dtypeName(dtype)), o.timeout, dtype, count, -1, o.op,
      gloo_detail::ringReduceScatter(*context_, ctx, in, out, count, dtype, o.op, workspace_));
}

std::shared_ptr<Work> GlooProcessGroup::broadcast(void* data, size_t count, DType dtype,
                                                  const BroadcastOptions& o) {
  checkHostBuffers(o.place, "broadcast");
  checkRoot(o.root, "broadcast");
  return LOCKSTEP_GLOO_OP(OpType::broadcast, concat(count, " x ", dtypeName(dtype)), o.timeout, dtype, count,
                          o.root, ReduceOp::sum, {
                            if (count == 0) return;
                            withType(dtype, [&](auto* tag) {
                              using T = std::remove_pointer_t<decltype(tag)>;
                              ::gloo::BroadcastOptions g(context_);
                              g.setOutput(static_cast<T*>(data), count);
                              g.setRoot(o.root);
                              g.setTag(static_cast<uint32_t>(ctx.seq));
                              g.setTimeout(remaining(ctx));
                              ::gloo::broadcast(g);
                            });
                          });
}

std::shared_ptr<Work> GlooProcessGroup::reduce(void* data, size_t count, DType dtype,
                                               const ReduceOptions& o) {
  checkHostBuffers(o.place, "reduce");
  checkRoot(o.root, "reduce");
  return LOCKSTEP_GLOO_OP(
      OpType::reduce, concat(count, " x ", dtypeName(dtype)), o.timeout, dtype, count, o.root, o.op, {
        if (count == 0) return;
        withType(dtype, [&](auto* tag) {
          using T = std::remove_pointer_t<decltype(tag)>;
          ::gloo::ReduceOptions g(context_);
          g.setOutput(static_cast<T*>(data), count);
          g.setRoot(o.root);
          g.setReduceFunction([dtype, op = o.op](void* c, const void* a, const void* b, size_t n) {
            reduceInto(c, a, b, n, dtype, op);
          });
          g.setTag(static_cast<uint32_t>(ctx.seq));
          g.setTimeout(remaining(ctx));
          ::gloo::reduce(g);
        });
        if (o.op == ReduceOp::avg && rank() == o.root) divideBy(data, count, dtype, size());
      });
}

std::shared_ptr<Work> GlooProcessGroup::allgather(const void* in, void* out, size_t count, DType dtype,
                                                  const AllgatherOptions& o) {
  checkHostBuffers(o.place, "allgather");
  return LOCKSTEP_GLOO_OP(OpType::allgather, concat(count, " x ", dtypeName(dtype)), o.timeout, dtype, count,
                          -1, ReduceOp::sum, {
                            if (count == 0) return;
                            withType(dtype, [&](auto* tag) {
                              using T = std::remove_pointer_t<decltype(tag)>;
                              ::gloo::AllgatherOptions g(context_);
                              g.setInput(const_cast<T*>(static_cast<const T*>(in)), count);
                              g.setOutput(static_cast<T*>(out), count * size());
                              g.setTag(static_cast<uint32_t>(ctx.seq));
                              g.setTimeout(remaining(ctx));
                              ::gloo::allgather(g);
                            });
                          });
}

std::shared_ptr<Work> GlooProcessGroup::allgatherv(const void* in, void* out,
                                                   const std::vector<size_t>& counts, DType dtype,
                                                   const AllgatherOptions& o) {
  checkHostBuffers(o.place, "allgatherv");
  LOCKSTEP_ENFORCE(counts.size() == static_cast<size_t>(size()), ValueError, "allgatherv: counts has ",
                   counts.size(), " entries but the group has ", size(), " ranks");
  size_t total = 0;
  for (size_t c : counts) total += c;
  return LOCKSTEP_GLOO_OP(OpType::allgatherv, concat(counts[rank()], " x ", dtypeName(dtype)), o.timeout,
                          dtype, total, -1, ReduceOp::sum, {
                            if (total == 0) return;
                            withType(dtype, [&](auto* tag) {
                              using T = std::remove_pointer_t<decltype(tag)>;
                              ::gloo::AllgathervOptions g(context_);
                              g.setInput(const_cast<T*>(static_cast<const T*>(in)), counts[rank()]);
                              g.setOutput(static_cast<T*>(out), counts);
                              g.setTag(static_cast<uint32_t>(ctx.seq));
                              g.setTimeout(remaining(ctx));
                              ::gloo::allgatherv(g);
                            });
                          });
}

std::shared_ptr<Work> GlooProcessGroup::gather(const void* in, void* out, size_t count, DType dtype,
                                               const GatherOptions& o) {
  checkHostBuffers(o.place, "gather");
  checkRoot(o.root, "gather");
  return LOCKSTEP_GLOO_OP(OpType::gather, concat(count, " x ", dtypeName(dtype)), o.timeout, dtype, count,
                          o.root, ReduceOp::sum, {
                            if (count == 0) return;
                            withType(dtype, [&](auto* tag) {
                              using T = std::remove_pointer_t<decltype(tag)>;
                              ::gloo::GatherOptions g(context_);
                              g.setInput(const_cast<T*>(static_cast<const T*>(in)), count);
                              if (rank() == o.root) g.setOutput(static_cast<T*>(out), count * size());
                              g.setRoot(o.root);
                              g.setTag(static_cast<uint32_t>(ctx.seq));
                              g.setTimeout(remaining(ctx));
                              ::gloo::gather(g);
                            });
                          });
}

std::shared_ptr<Work> GlooProcessGroup::scatter(const void* in, void* out, size_t count, DType dtype,
                                                const ScatterOptions& o) {
  checkHostBuffers(o.place, "scatter");
  checkRoot(o.root, "scatter");
  return LOCKSTEP_GLOO_OP(OpType::scatter, concat(count, " x ", dtypeName(dtype)), o.timeout, dtype, count,
                          o.root, ReduceOp::sum, {
                            if (count == 0) return;
                            withType(dtype, [&](auto* tag) {
                              using T = std::remove_pointer_t<decltype(tag)>;
                              ::gloo::ScatterOptions g(context_);
                              if (rank() == o.root) {
                                std::vector<T*> ptrs;
                                T* base = const_cast<T*>(static_cast<const T*>(in));
                                for (int j = 0; j < size(); ++j) ptrs.push_back(base + j * count);
                                g.setInputs(ptrs, count);
                              }
                              g.setOutput(static_cast<T*>(out), count);
                              g.setRoot(o.root);
                              g.setTag(static_cast<uint32_t>(ctx.seq));
                              g.setTimeout(remaining(ctx));
                              ::gloo::scatter(g);
                            });
                          });
}

std::shared_ptr<Work> GlooProcessGroup::alltoall(const void* in, void* out, size_t count, DType dtype,
                                                 const AlltoallOptions& o) {
  checkHostBuffers(o.place, "alltoall");
  return LOCKSTEP_GLOO_OP(OpType::alltoall, concat(count, " x ", dtypeName(dtype)), o.timeout, dtype, count,
                          -1, ReduceOp::sum, {
                            if (count == 0) return;
                            withType(dtype, [&](auto* tag) {
                              using T = std::remove_pointer_t<decltype(tag)>;
                              ::gloo::AlltoallOptions g(context_);
                              g.setInput(const_cast<T*>(static_cast<const T*>(in)), count * size());
                              g.setOutput(static_cast<T*>(out), count * size());
                              g.setTag(static_cast<uint32_t>(ctx.seq));
                              g.setTimeout(remaining(ctx));
                              ::gloo::alltoall(g);
                            });
                          });
}

std::shared_ptr<Work> GlooProcessGroup::barrier(const BarrierOptions& o) {
  return LOCKSTEP_GLOO_OP(OpType::barrier, "", o.timeout, DType::u8, 0, -1, ReduceOp::sum, {
    ::gloo::BarrierOptions g(context_);
    g.setTag(static_cast<uint32_t>(ctx.seq));
    g.setTimeout(remaining(ctx));
    ::gloo::barrier(g);
  });
}

namespace {

// A send or receive: the group's queue posts it to gloo (in issue order, after the ops before it)
// and goes on; the transfer completes in gloo, and wait() waits for it there. Waiting in the queue
// instead, a receive posted ahead of its data held every later op of the rank back until the
// data came: a pipeline stage's sends waited for gradients it had asked for early.
struct PostedP2P {
  std::unique_ptr<::gloo::transport::UnboundBuffer> buf;
  OpContext ctx;
};

class GlooP2PWork final : public PostedWork {
 public:
  GlooP2PWork(std::shared_ptr<Work> posting, std::shared_ptr<PostedP2P> posted, int peer, int tag, int rank)
      : PostedWork(std::move(posting)), posted_(std::move(posted)), peer_(peer), tag_(tag), rank_(rank) {}

 private:
  bool awaitTransfer(std::chrono::milliseconds timeout) override {
    // The buffer goes with the transfer, however it ended: a wait cut short fails gloo's context,
    // as any gloo op that times out does.
    std::shared_ptr<PostedP2P> posted = std::move(posted_);
    const OpContext& ctx = posted->ctx;
    const bool sending = ctx.type == OpType::send;
    const auto limit = std::min(timeout, remaining(ctx));
    try {
      OpWatchScope watched(ctx);  // the agent's watchdog sees the wait
      if (sending)
        posted->buf->waitSend(limit);
      else
        posted->buf->waitRecv(limit);
    } catch (const std::exception& e) {
      const std::string what = e.what(),
                        peer = concat("waiting for rank ", peer_, sending ? " to receive" : " to send",
                                      " (tag ", tag_, ")");
      if (what.find("Timed out") != std::string::npos)
        throw TimeoutError(concat(description(), " timed out after ", limit.count(), " ms on rank ", rank_,
                                  " ", peer, ": ", what));
      throw PeerError(concat(description(), " failed on rank ", rank_, " ", peer,
                             ": a peer connection broke (did rank ", peer_, " die?): ", what));
    }
    return true;
  }

  std::shared_ptr<PostedP2P> posted_;
  int peer_, tag_, rank_;
};

}  // namespace

std::shared_ptr<Work> GlooProcessGroup::postP2P(OpType type, void* data, size_t count, DType dtype, int peer,
                                                const SendRecvOptions& o) {
  const bool sending = type == OpType::send;
  auto posted = std::make_shared<PostedP2P>();
  auto posting =
      enqueue(type, concat(count, " x ", dtypeName(dtype), sending ? " to rank " : " from rank ", peer),
              o.timeout, [=, this](const OpContext& ctx) {
                run(ctx, dtype, count, peer, ReduceOp::sum, [&] {
                  posted->ctx = ctx;
                  posted->buf = context_->createUnboundBuffer(data, count * dtypeSize(dtype));
                  const auto slot = ::gloo::Slot::build(kP2PSlotPrefix, static_cast<uint32_t>(o.tag));
                  if (sending)
                    posted->buf->send(peer, slot);
                  else
                    posted->buf->recv(peer, slot);
                });
              });
  return std::make_shared<GlooP2PWork>(std::move(posting), std::move(posted), peer, o.tag, rank());
}

std::shared_ptr<Work> GlooProcessGroup::send(const void* data, size_t count, DType dtype, int dst,
                                             const SendRecvOptions& o) {
  checkHostBuffers(o.place, "send");
  checkPeer(dst, "send");
  return postP2P(OpType::send, const_cast<void*>(data), count, dtype, dst, o);
}

std::shared_ptr<Work> GlooProcessGroup::recv(void* data, size_t count, DType dtype, int src,
                                             const SendRecvOptions& o) {
  checkHostBuffers(o.place, "recv");
  checkPeer(src, "recv");
  return postP2P(OpType::recv, data, count, dtype, src, o);
}

std::shared_ptr<ProcessGroup> GlooProcessGroup::newGroup(const std::vector<int>& ranks) {
  auto id = groups_created_++;
  const Subgroup g = subgroup(ranks);
  if (g.rank < 0) return nullptr;
  GlooOptions o = options_;
  o.timeout = timeout();
  return std::make_shared<GlooProcessGroup>(std::make_shared<PrefixStore>("sub" + std::to_string(id), store_),
                                            g.rank, static_cast<int>(g.ranks.size()), o);
}

}  // namespace lockstep::comm
