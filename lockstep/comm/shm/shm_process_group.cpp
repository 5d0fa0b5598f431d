#include "lockstep/comm/shm/shm_process_group.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "lockstep/comm/group_arrival.h"
#include "lockstep/comm/store/prefix_store.h"
#include "lockstep/util/error.h"

namespace lockstep::comm {

using shm::OpDesc;
using shm::ShmHeader;
using shm::ShmSegment;

namespace {
constexpr size_t kHeaderBytes = 4096;
static_assert(sizeof(ShmHeader) <= kHeaderBytes);

// Copies into memory this rank owns with non-temporal stores: the result of a large allreduce is
// not read back soon, and streaming skips reading each destination line before writing it.
void streamCopy(uint8_t* dst, const uint8_t* src, size_t n) {
#if defined(__SSE2__)
  size_t head = (16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16;
  if (n < head + 64) {
    std::memcpy(dst, src, n);
    return;
  }
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  n -= head;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
  std::memcpy(dst + i, src + i, n - i);
#else
  std::memcpy(dst, src, n);
#endif
}

std::string randomToken() {
  std::random_device rd;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%08x%08x", rd(), rd());
  return buf;
}
}  // namespace

ShmProcessGroup::ShmProcessGroup(std::shared_ptr<Store> store, int rank, int size, const ShmOptions& options)
    : ProcessGroup(rank, size), store_(std::move(store)), options_(options) {
  setTimeout(options.timeout);
  LOCKSTEP_ENFORCE(options_.block_bytes >= 4096 && options_.block_bytes % 64 == 0, ValueError,
                   "ShmOptions.block_bytes must be a multiple of 64 and at least 4096, got ",
                   options_.block_bytes);
  LOCKSTEP_ENFORCE(options_.num_slots >= 2, ValueError, "ShmOptions.num_slots must be at least 2, got ",
                   options_.num_slots);
  LOCKSTEP_ENFORCE(
      options_.p2p_slot_bytes >= 4096 && options_.p2p_slot_bytes % 64 == 0 && options_.p2p_slots >= 1,
      ValueError, "ShmOptions.p2p_slot_bytes must be a multiple of 64 and at least 4096 (got ",
      options_.p2p_slot_bytes, ") and p2p_slots at least 1 (got ", options_.p2p_slots, ")");
  awaitGroupArrival(*store_, "shm/arrived", "shm", rank, size, options_.timeout);
  std::string base;
  if (rank == 0) {
    // Named by this pid namespace too: a container sharing /dev/shm (--ipc=host) sees other pids.
    const std::string ns = shm::pidNamespaceTag();
    ShmSegment::removeLeftovers("lockstep_" + ns + "_");  // of ranks killed during a group's set-up
    base = "/lockstep_" + ns + "_" + std::to_string(::getpid()) + "_" + randomToken();
    store_->setString("shm/name", base);
  } else {
    base = store_->getString("shm/name");
  }
  // The staging ring, then the point-to-point channels.
  const size_t p2p_base = kHeaderBytes + options_.num_slots * options_.block_bytes;
  const size_t bytes =
      p2p_base + shm::ShmPointToPoint::regionBytes(size, options_.p2p_slot_bytes, options_.p2p_slots);
  segments_.resize(size);
  segments_[rank] = ShmSegment::create(base + "_" + std::to_string(rank), bytes);
  auto* mine = new (segments_[rank].data()) ShmHeader();
  mine->pid = ::getpid();
  mine->magic = ShmHeader::kMagic;
  // Every rank lays its segment out from its own options: they must agree, or the slots do not
  // line up (the same size in another layout would read garbage).
  const std::string layout =
      ::lockstep::detail::concat(options_.num_slots, " slots of ", options_.block_bytes, " bytes, ",
                                 options_.p2p_slots, " p2p slots of ", options_.p2p_slot_bytes, " bytes");
  store_->setString("shm/created/" + std::to_string(rank), layout);
  std::vector<std::string> keys;
  for (int j = 0; j < size; ++j) keys.push_back("shm/created/" + std::to_string(j));
  store_->wait(keys);
  for (int j = 0; j < size; ++j) {
    const std::string theirs = store_->getString(keys[static_cast<size_t>(j)]);
    LOCKSTEP_ENFORCE(theirs == layout, PeerError, "shm backend: rank ", j, "'s segment has ", theirs,
                     ", rank ", rank, "'s ", layout,
                     ": the ranks' shm settings differ (LOCKSTEP_SHM_SLOTS, LOCKSTEP_SHM_BLOCK_BYTES, "
                     "LOCKSTEP_SHM_P2P_SLOTS, LOCKSTEP_SHM_P2P_SLOT_BYTES); give every rank the same");
  }
  std::vector<ShmHeader*> headers(size);
  for (int j = 0; j < size; ++j) {
    if (j != rank) segments_[j] = ShmSegment::open(base + "_" + std::to_string(j), bytes);
    headers[j] = static_cast<ShmHeader*>(segments_[j].data());
    LOCKSTEP_ENFORCE(headers[j]->magic == ShmHeader::kMagic, PeerError, "shm backend: segment of rank ", j,
                     " is not initialised; was it created by another job with the same store?");
  }
  store_->setString("shm/mapped/" + std::to_string(rank), "1");
  keys.clear();
  for (int j = 0; j < size; ++j) keys.push_back("shm/mapped/" + std::to_string(j));
  store_->wait(keys);
  segments_[rank].unlink();  // every peer holds a mapping: nothing is left behind on a crash
  peers_ = std::make_unique<shm::ShmPeers>(rank, std::move(headers), options_.spin);
  std::vector<uint8_t*> channels(size);
  for (int j = 0; j < size; ++j) channels[j] = static_cast<uint8_t*>(segments_[j].data()) + p2p_base;
  p2p_ = std::make_shared<shm::ShmPointToPoint>(rank, std::move(channels), options_.p2p_slot_bytes,
                                                options_.p2p_slots, peers_.get());
}

ShmProcessGroup::~ShmProcessGroup() { stopWorker(); }

uint8_t* ShmProcessGroup::slot(int rank, uint64_t block) const {
  return static_cast<uint8_t*>(segments_[rank].data()) + kHeaderBytes +
         (block % options_.num_slots) * options_.block_bytes;
}

OpDesc ShmProcessGroup::desc(const OpContext& ctx, DType dtype, size_t count, int root, ReduceOp op,
                             uint64_t extra) const {
  OpDesc d;
  d.seq = ctx.seq;
  d.type = static_cast<uint8_t>(ctx.type);
  d.dtype = static_cast<uint8_t>(dtype);
  d.count = count;
  d.root = root;
  d.op = static_cast<uint8_t>(op);
  d.extra = extra;
  return d;
}

void ShmProcessGroup::fail() { peers_->abort(); }

template <typename Stage, typename Middle, typename Final>
void ShmProcessGroup::pipeline(const OpContext& ctx, size_t nblocks, Stage stage, Middle middle, Final final,
                               bool has_final) {
  nblocks = std::max<size_t>(nblocks, 1);  // an empty op still meets its peers once
  const uint64_t g0 = block_;
  const uint64_t slots = options_.num_slots;
  size_t s = 0, m = 0, f = 0;  // blocks staged, reduced, done by this rank
  // Slot g % slots is free once every rank is done with block g - slots (it read our slot).
  auto canStage = [&] {
    return s < nblocks && (g0 + s < slots || peers_->allAtLeast(shm::kDone, g0 + s - slots + 1));
  };
  auto canMiddle = [&] { return m < s && peers_->allAtLeast(shm::kStaged, g0 + m + 1); };
  auto canFinal = [&] { return f < m && (!has_final || peers_->allAtLeast(shm::kReduced, g0 + f + 1)); };
  while (f < nblocks) {
    bool progress = false;
    while (canStage()) {
      stage(s, slot(rank(), g0 + s));
      peers_->publish(shm::kStaged, g0 + ++s);
      progress = true;
    }
    while (canMiddle()) {
      if (m == 0) peers_->checkDescs(ctx);
      middle(m, g0 + m);
      peers_->publish(shm::kReduced, g0 + ++m);
      progress = true;
    }
    while (canFinal()) {
      final(f, g0 + f);
      peers_->publish(shm::kDone, g0 + ++f);
      progress = true;
    }
    if (!progress) peers_->waitUntil(ctx, g0, [&] { return canStage() || canMiddle() || canFinal(); });
  }
  block_ = g0 + nblocks;
}

void ShmProcessGroup::runAllreduce(const OpContext& ctx, uint8_t* data, size_t count, DType dtype,
                                   ReduceOp op) {
  const size_t es = dtypeSize(dtype);
  const size_t per_block = options_.block_bytes / es;
  const size_t align = 64 / es;
  const size_t nblocks = (count + per_block - 1) / per_block;
  const int n = size(), r = rank();
  peers_->post(ctx, desc(ctx, dtype, count, -1, op));
  // Chunk j of block b: elements [off(b, j), off(b, j + 1)) of the block, 64-byte aligned.
  auto off = [&](size_t b, int j) {
    const size_t len = std::min(per_block, count - b * per_block);
    const size_t chunk = ((len + n - 1) / n + align - 1) / align * align;
    return std::min(len, static_cast<size_t>(j) * chunk);
  };
  auto stage = [&](size_t b, uint8_t* mine) {
    if (count == 0) return;
    const uint8_t* block = data + b * per_block * es;
    for (int j = 0; j < n; ++j) {
      if (j != r)
        std::memcpy(mine + off(b, j) * es, block + off(b, j) * es, (off(b, j + 1) - off(b, j)) * es);
    }
  };
  auto middle = [&](size_t b, uint64_t g) {
    if (count == 0) return;
    const size_t lo = off(b, r), len = off(b, r + 1) - lo;
    if (len == 0) return;
    uint8_t* acc = data + (b * per_block + lo) * es;
    uint8_t* out = slot(r, g) + lo * es;  // published in place of this rank's unused staging chunk
    const int last = r == n - 1 ? n - 2 : n - 1;
    for (int j = 0; j < n; ++j) {
      if (j == r) continue;
      // The last step also writes the published copy and, for avg, divides: all in one pass.
      const bool fuse = j == last;
      reduceInto(acc, acc, slot(j, g) + lo * es, len, dtype, op, fuse ? out : nullptr,
                 fuse && op == ReduceOp::avg ? n : 1);
    }
  };
  // Large results bypass the cache on the way out (see streamCopy).
  const bool stream = count * es >= options_.stream_min_bytes;
  auto final = [&](size_t b, uint64_t g) {
    if (count == 0) return;
    uint8_t* block = data + b * per_block * es;
    for (int j = 0; j < n; ++j) {
      if (j == r) continue;
      const size_t bytes = (off(b, j + 1) - off(b, j)) * es;
      if (stream) {
        streamCopy(block + off(b, j) * es, slot(j, g) + off(b, j) * es, bytes);
      } else {
        std::memcpy(block + off(b, j) * es, slot(j, g) + off(b, j) * es, bytes);
      }
    }
#if defined(__SSE2__)
    if (stream) _mm_sfence();  // order the streamed stores before publishing "done"
#endif
  };
  pipeline(ctx, nblocks, stage, middle, final, true);
}

void ShmProcessGroup::runReduceScatter(const OpContext& ctx, const uint8_t* in, uint8_t* out, size_t count,
                                       DType dtype, ReduceOp op) {
  const size_t es = dtypeSize(dtype);
  const int n = size(), r = rank();
  // Block b covers elements [b*per, (b+1)*per) of every rank's output chunk: a slot holds one
  // piece per destination rank, each 64-byte aligned, at piece j * per.
  const size_t align = std::max<size_t>(1, 64 / es);
  size_t per = options_.block_bytes / static_cast<size_t>(n) / es / align * align;
  if (per == 0) per = options_.block_bytes / static_cast<size_t>(n) / es;  // checked >= 1 at issue
  LOCKSTEP_CHECK(per >= 1 && per * n * es <= options_.block_bytes, "per ", per, " n ", n, " es ", es);
  const size_t nblocks = (count + per - 1) / per;
  peers_->post(ctx, desc(ctx, dtype, count, -1, op));
  auto len = [&](size_t b) { return std::min(per, count - b * per); };
  // Stage only what the peers reduce: rank j's piece of this block, for every j != r.
  auto stage = [&](size_t b, uint8_t* mine) {
    if (count == 0) return;
    for (int j = 0; j < n; ++j) {
      if (j != r) std::memcpy(mine + j * per * es, in + (j * count + b * per) * es, len(b) * es);
    }
  };
  // Reduce this rank's own piece straight into out, reading every peer's staged copy of it.
  auto middle = [&](size_t b, uint64_t g) {
    if (count == 0) return;
    uint8_t* acc = out + b * per * es;
    const uint8_t* first = in + (r * count + b * per) * es;
    if (n == 1) {
      std::memcpy(acc, first, len(b) * es);
      return;
    }
    const int last = r == n - 1 ? n - 2 : n - 1;
    for (int j = 0; j < n; ++j) {
      if (j == r) continue;
      const uint8_t* a = j == (r == 0 ? 1 : 0) ? first : acc;  // the first combining step reads in
      reduceInto(acc, a, slot(j, g) + r * per * es, len(b), dtype, op, nullptr,
                 j == last && op == ReduceOp::avg ? n : 1);
    }
  };
  pipeline(
      ctx, nblocks, stage, middle, [](size_t, uint64_t) {}, false);
}

template <typename Sink>
void ShmProcessGroup::runRounds(const OpContext& ctx, const uint8_t* my_src,
                                const std::vector<size_t>& src_bytes, Sink sink) {
  const size_t B = options_.block_bytes;
  size_t rounds = 0;
  for (size_t b : src_bytes) rounds = std::max(rounds, (b + B - 1) / B);
  const int n = size(), r = rank();
  auto piece = [&](int j, size_t k) { return src_bytes[j] > k * B ? std::min(B, src_bytes[j] - k * B) : 0; };
  auto stage = [&](size_t k, uint8_t* mine) {
    if (piece(r, k) > 0) std::memcpy(mine, my_src + k * B, piece(r, k));
  };
  auto middle = [&](size_t k, uint64_t g) {
    for (int j = 0; j < n; ++j) {
      if (piece(j, k) > 0) sink(j, k * B, j == r ? my_src + k * B : slot(j, g), piece(j, k));
    }
  };
  pipeline(
      ctx, rounds, stage, middle, [](size_t, uint64_t) {}, false);
}

namespace {
// Copies the part of piece [off, off+n) that falls in window [lo, lo+len) to dst + (pos - lo).
void copyWindow(uint8_t* dst, size_t lo, size_t len, size_t off, const uint8_t* p, size_t n) {
  size_t a = std::max(lo, off), b = std::min(lo + len, off + n);
  if (a < b && dst + (a - lo) != p + (a - off)) std::memcpy(dst + (a - lo), p + (a - off), b - a);
}
uint64_t hashCounts(const std::vector<size_t>& counts) {
  uint64_t h = 1469598103934665603ull;
  for (size_t c : counts) h = (h ^ c) * 1099511628211ull;
  return h;
}
}  // namespace

#define LOCKSTEP_SHM_BODY(...)      \
  [=, this](const OpContext& ctx) { \
    try {                           \
      __VA_ARGS__;                  \
    } catch (...) {                 \
      fail();                       \
      throw;                        \
    }                               \
  }

std::shared_ptr<Work> ShmProcessGroup::allreduce(void* data, size_t count, DType dtype,
                                                 const AllreduceOptions& o) {
  checkHostBuffers(o.place, "allreduce");
  auto* p = static_cast<uint8_t*>(data);
  return enqueue(OpType::allreduce, ::lockstep::detail::concat(count, " x ", dtypeName(dtype)), o.timeout,
                 LOCKSTEP_SHM_BODY(runAllreduce(ctx, p, count, dtype, o.op)), o.defer);
}

std::shared_ptr<Work> ShmProcessGroup::reduce(void* data, size_t count, DType dtype, const ReduceOptions& o) {
  checkHostBuffers(o.place, "reduce");
  checkRoot(o.root, "reduce");
  auto* p = static_cast<uint8_t*>(data);
  // Every rank ends with the result: allowed, since non-root buffers are unspecified.
  return enqueue(OpType::reduce, ::lockstep::detail::concat(count, " x ", dtypeName(dtype)), o.timeout,
                 LOCKSTEP_SHM_BODY(runAllreduce(ctx, p, count, dtype, o.op)));
}

std::shared_ptr<Work> ShmProcessGroup::reduceScatter(const void* in, void* out, size_t count, DType dtype,
                                                     const ReduceScatterOptions& o) {
  checkHostBuffers(o.place, "reduce_scatter");
  // A slot holds one piece per rank: at least one element each.
  LOCKSTEP_ENFORCE(options_.block_bytes >= static_cast<size_t>(size()) * dtypeSize(dtype), ValueError,
                   "reduce_scatter: ShmOptions.block_bytes (", options_.block_bytes, ") is too small for ",
                   size(), " ranks of ", dtypeName(dtype),
                   "; raise it (env LOCKSTEP_SHM_BLOCK_BYTES) to at least ",
                   static_cast<size_t>(size()) * dtypeSize(dtype));
  auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  return enqueue(OpType::reduceScatter, ::lockstep::detail::concat(count, " x ", dtypeName(dtype)), o.timeout,
                 LOCKSTEP_SHM_BODY(runReduceScatter(ctx, src, dst, count, dtype, o.op)));
}

std::shared_ptr<Work> ShmProcessGroup::broadcast(void* data, size_t count, DType dtype,
                                                 const BroadcastOptions& o) {
  checkHostBuffers(o.place, "broadcast");
  checkRoot(o.root, "broadcast");
  auto* p = static_cast<uint8_t*>(data);
  return enqueue(OpType::broadcast, ::lockstep::detail::concat(count, " x ", dtypeName(dtype)), o.timeout,
                 LOCKSTEP_SHM_BODY({
                   const size_t bytes = count * dtypeSize(dtype);
                   std::vector<size_t> src(size(), 0);
                   src[o.root] = bytes;
                   peers_->post(ctx, desc(ctx, dtype, count, o.root));
                   runRounds(ctx, p, src, [&](int, size_t off, const uint8_t* q, size_t n) {
                     if (p + off != q) std::memcpy(p + off, q, n);
                   });
                 }));
}

std::shared_ptr<Work> ShmProcessGroup::allgatherv(const void* in, void* out,
                                                  const std::vector<size_t>& counts, DType dtype,
                                                  const AllgatherOptions& o) {
  checkHostBuffers(o.place, "allgatherv");
  LOCKSTEP_ENFORCE(counts.size() == static_cast<size_t>(size()), ValueError, "allgatherv: counts has ",
                   counts.size(), " entries but the group has ", size(), " ranks");
  auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  return enqueue(OpType::allgatherv, ::lockstep::detail::concat(counts[rank()], " x ", dtypeName(dtype)),
                 o.timeout, LOCKSTEP_SHM_BODY({
                   const size_t es = dtypeSize(dtype);
                   std::vector<size_t> bytes(size()), displ(size() + 1, 0);
                   for (int j = 0; j < size(); ++j) {
                     bytes[j] = counts[j] * es;
                     displ[j + 1] = displ[j] + bytes[j];
                   }
                   peers_->post(ctx,
                                desc(ctx, dtype, displ[size()] / es, -1, ReduceOp::sum, hashCounts(counts)));
                   runRounds(ctx, src, bytes, [&](int j, size_t off, const uint8_t* q, size_t n) {
                     std::memcpy(dst + displ[j] + off, q, n);
                   });
                 }));
}

std::shared_ptr<Work> ShmProcessGroup::allgather(const void* in, void* out, size_t count, DType dtype,
                                                 const AllgatherOptions& o) {
  checkHostBuffers(o.place, "allgather");
  return allgatherv(in, out, std::vector<size_t>(size(), count), dtype, o);
}

std::shared_ptr<Work> ShmProcessGroup::gather(const void* in, void* out, size_t count, DType dtype,
                                              const GatherOptions& o) {
  checkHostBuffers(o.place, "gather");
  checkRoot(o.root, "gather");
  auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  return enqueue(OpType::gather, ::lockstep::detail::concat(count, " x ", dtypeName(dtype)), o.timeout,
                 LOCKSTEP_SHM_BODY({
                   const size_t bytes = count * dtypeSize(dtype);
                   peers_->post(ctx, desc(ctx, dtype, count, o.root));
                   bool is_root = rank() == o.root;
                   runRounds(ctx, src, std::vector<size_t>(size(), bytes),
                             [&](int j, size_t off, const uint8_t* q, size_t n) {
                               if (is_root) std::memcpy(dst + j * bytes + off, q, n);
                             });
                 }));
}

std::shared_ptr<Work> ShmProcessGroup::scatter(const void* in, void* out, size_t count, DType dtype,
                                               const ScatterOptions& o) {
  checkHostBuffers(o.place, "scatter");
  checkRoot(o.root, "scatter");
  auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  return enqueue(OpType::scatter, ::lockstep::detail::concat(count, " x ", dtypeName(dtype)), o.timeout,
                 LOCKSTEP_SHM_BODY({
                   const size_t bytes = count * dtypeSize(dtype);
                   std::vector<size_t> srcb(size(), 0);
                   srcb[o.root] = bytes * size();
                   peers_->post(ctx, desc(ctx, dtype, count, o.root));
                   runRounds(ctx, src, srcb, [&](int, size_t off, const uint8_t* q, size_t n) {
                     copyWindow(dst, bytes * rank(), bytes, off, q, n);
                   });
                 }));
}

std::shared_ptr<Work> ShmProcessGroup::alltoall(const void* in, void* out, size_t count, DType dtype,
                                                const AlltoallOptions& o) {
  checkHostBuffers(o.place, "alltoall");
  auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  return enqueue(OpType::alltoall, ::lockstep::detail::concat(count, " x ", dtypeName(dtype)), o.timeout,
                 LOCKSTEP_SHM_BODY({
                   const size_t bytes = count * dtypeSize(dtype);
                   peers_->post(ctx, desc(ctx, dtype, count));
                   runRounds(ctx, src, std::vector<size_t>(size(), bytes * size()),
                             [&](int j, size_t off, const uint8_t* q, size_t n) {
                               copyWindow(dst + j * bytes, bytes * rank(), bytes, off, q, n);
                             });
                 }));
}

std::shared_ptr<Work> ShmProcessGroup::barrier(const BarrierOptions& o) {
  return enqueue(OpType::barrier, "", o.timeout, LOCKSTEP_SHM_BODY({
                   peers_->post(ctx, desc(ctx, DType::u8, 0));
                   runRounds(ctx, nullptr, std::vector<size_t>(size(), 0),
                             [](int, size_t, const uint8_t*, size_t) {});
                 }));
}

namespace {

// A send or receive: the group's queue posts it to the channels (in issue order, on the calling
// thread when the queue is idle) and goes on; the transfer advances beside the queue
// (shm_point_to_point.h), and wait() advances it on the waiting thread.
class ShmP2PWork final : public PostedWork {
 public:
  ShmP2PWork(std::shared_ptr<Work> posting, std::shared_ptr<shm::Transfer> transfer,
             std::weak_ptr<shm::ShmPointToPoint> p2p)
      : PostedWork(std::move(posting)), transfer_(std::move(transfer)), p2p_(std::move(p2p)) {}

 private:
  bool transferFinished() const override { return transfer_->finished(); }
  bool awaitTransfer(std::chrono::milliseconds timeout) override {
    auto p2p = p2p_.lock();
    if (p2p) return p2p->await(*transfer_, timeout);
    LOCKSTEP_ENFORCE(transfer_->finished(), ValueError, description(),
                     ": its process group was destroyed before the transfer finished");
    if (transfer_->state.load() == shm::Transfer::State::failed) std::rethrow_exception(transfer_->error);
    return true;  // (the group, and its progress thread, are gone: this thread owns the error now)
  }

  std::shared_ptr<shm::Transfer> transfer_;
  std::weak_ptr<shm::ShmPointToPoint> p2p_;
};

}  // namespace

std::shared_ptr<Work> ShmProcessGroup::postP2P(OpType type, uint8_t* data, size_t count, DType dtype,
                                               int peer, int tag, std::chrono::milliseconds timeout) {
  const bool sending = type == OpType::send;
  auto transfer = std::make_shared<shm::Transfer>(sending, data, count * dtypeSize(dtype), dtype, peer, tag);
  auto posting =
      enqueueOrRun(type,
                   ::lockstep::detail::concat(count, " x ", dtypeName(dtype),
                                              sending ? " to rank " : " from rank ", peer, ", tag ", tag),
                   timeout, LOCKSTEP_SHM_BODY(p2p_->post(ctx, transfer)));
  return std::make_shared<ShmP2PWork>(std::move(posting), std::move(transfer), p2p_);
}

std::shared_ptr<Work> ShmProcessGroup::send(const void* data, size_t count, DType dtype, int dst,
                                            const SendRecvOptions& o) {
  checkHostBuffers(o.place, "send");
  checkPeer(dst, "send");
  return postP2P(OpType::send, static_cast<uint8_t*>(const_cast<void*>(data)), count, dtype, dst, o.tag,
                 o.timeout);
}

std::shared_ptr<Work> ShmProcessGroup::recv(void* data, size_t count, DType dtype, int src,
                                            const SendRecvOptions& o) {
  checkHostBuffers(o.place, "recv");
  checkPeer(src, "recv");
  return postP2P(OpType::recv, static_cast<uint8_t*>(data), count, dtype, src, o.tag, o.timeout);
}

std::shared_ptr<ProcessGroup> ShmProcessGroup::newGroup(const std::vector<int>& ranks) {
  auto id = groups_created_++;
  const Subgroup g = subgroup(ranks);
  if (g.rank < 0) return nullptr;
  auto store = std::make_shared<PrefixStore>("sub" + std::to_string(id), store_);
  ShmOptions o = options_;
  o.timeout = timeout();
  return std::make_shared<ShmProcessGroup>(store, g.rank, static_cast<int>(g.ranks.size()), o);
}

}  // namespace lockstep::comm
