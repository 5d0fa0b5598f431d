#include "lockstep/comm/shm/shm_point_to_point.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "lockstep/util/error.h"

namespace lockstep::comm::shm {

namespace {
constexpr size_t kChannelCtrlBytes = 128;  // the two counter lines
constexpr size_t kChunkHeaderBytes = 64;
struct ChunkHeader {
  int64_t tag;
  uint64_t bytes;  // the whole message's
  uint32_t dtype;
  uint32_t index;  // of this chunk in its message
};
static_assert(sizeof(ChunkHeader) <= kChunkHeaderBytes);

size_t channelBytes(size_t slot_bytes, size_t slots) { return kChannelCtrlBytes + slots * slot_bytes; }
}  // namespace

size_t ShmPointToPoint::regionBytes(int size, size_t slot_bytes, size_t slots) {
  return static_cast<size_t>(size) * channelBytes(slot_bytes, slots);
}

ShmPointToPoint::ShmPointToPoint(int rank, std::vector<uint8_t*> regions, size_t slot_bytes, size_t slots,
                                 ShmPeers* peers)
    : rank_(rank),
      regions_(std::move(regions)),
      slot_bytes_(slot_bytes),
      slots_(slots),
      channel_bytes_(channelBytes(slot_bytes, slots)),
      peers_(peers) {}

uint8_t* ShmPointToPoint::channel(int from, int to) const {
  return regions_[from] + static_cast<size_t>(to) * channel_bytes_;
}

uint8_t* ShmPointToPoint::chunkSlot(int from, int to, uint64_t chunk) const {
  return channel(from, to) + kChannelCtrlBytes + (chunk % slots_) * slot_bytes_;
}

std::atomic_ref<uint64_t> ShmPointToPoint::chunksSent(int from, int to) const {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(channel(from, to)));
}

std::atomic_ref<uint64_t> ShmPointToPoint::chunksReceived(int to, int from) const {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(channel(to, from) + 64));
}

size_t ShmPointToPoint::payloadBytes() const { return slot_bytes_ - kChunkHeaderBytes; }

void ShmPointToPoint::send(const OpContext& ctx, const uint8_t* data, size_t bytes, DType dtype, int dst,
                           int tag) {
  const size_t payload = payloadBytes();
  const size_t chunks = std::max<size_t>(1, (bytes + payload - 1) / payload);
  std::atomic_ref<uint64_t> sent = chunksSent(rank_, dst);
  std::atomic_ref<uint64_t> received = chunksReceived(dst, rank_);
  uint64_t s = sent.load(std::memory_order_relaxed);
  const std::string waiting = ::lockstep::detail::concat("rank ", dst, " to receive (tag ", tag, ")");
  for (size_t k = 0; k < chunks; ++k) {
    peers_->waitForPeer(ctx, dst, waiting,
                        [&] { return s - received.load(std::memory_order_acquire) < slots_; });
    uint8_t* slot = chunkSlot(rank_, dst, s);
    ChunkHeader h{tag, bytes, static_cast<uint32_t>(dtype), static_cast<uint32_t>(k)};
    std::memcpy(slot, &h, sizeof(h));
    const size_t off = k * payload;
    if (bytes > off) std::memcpy(slot + kChunkHeaderBytes, data + off, std::min(payload, bytes - off));
    sent.store(++s, std::memory_order_seq_cst);
    peers_->wake();
  }
}

namespace {
// A recv's message of the wrong size or dtype: the two ranks disagree on the call.
void checkMatches(const OpContext& ctx, int rank, int src, int tag, DType want, size_t want_bytes, DType got,
                  size_t got_bytes) {
  if (got == want && got_bytes == want_bytes) return;
  throw PeerError(::lockstep::detail::concat(ctx.name, " on rank ", rank, ": rank ", src,
                                             "'s message with tag ", tag, " is ", got_bytes / dtypeSize(got),
                                             " x ", dtypeName(got), " but this recv expects ",
                                             want_bytes / dtypeSize(want), " x ", dtypeName(want),
                                             "; a send and its recv must agree on count and dtype"));
}
}  // namespace

bool ShmPointToPoint::takeBuffered(const OpContext& ctx, uint8_t* data, size_t bytes, DType dtype, int src,
                                   int tag) {
  auto it = buffered_.find({src, tag});
  if (it == buffered_.end()) return false;
  Buffered b = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) buffered_.erase(it);
  checkMatches(ctx, rank_, src, tag, dtype, bytes, b.dtype, b.bytes.size());
  if (bytes > 0) std::memcpy(data, b.bytes.data(), bytes);
  return true;
}

void ShmPointToPoint::recv(const OpContext& ctx, uint8_t* data, size_t bytes, DType dtype, int src, int tag) {
  if (takeBuffered(ctx, data, bytes, dtype, src, tag)) return;
  const size_t payload = payloadBytes();
  std::atomic_ref<uint64_t> sent = chunksSent(src, rank_);
  std::atomic_ref<uint64_t> received = chunksReceived(rank_, src);
  uint64_t r = received.load(std::memory_order_relaxed);
  const std::string waiting = ::lockstep::detail::concat("rank ", src, " to send (tag ", tag, ")");
  while (true) {  // one message from src per round, until the one with this tag
    uint8_t* out = nullptr;
    size_t total = 0, chunks = 1;
    bool mine = false;
    for (size_t k = 0; k < chunks; ++k) {
      peers_->waitForPeer(ctx, src, waiting, [&] { return sent.load(std::memory_order_acquire) > r; });
      const uint8_t* slot = chunkSlot(src, rank_, r);
      ChunkHeader h;
      std::memcpy(&h, slot, sizeof(h));
      LOCKSTEP_CHECK(h.index == k, ctx.name, ": chunk ", h.index, " from rank ", src, " where chunk ", k,
                     " was due");
      if (k == 0) {
        total = h.bytes;
        chunks = std::max<size_t>(1, (total + payload - 1) / payload);
        mine = h.tag == tag;
        if (mine) {
          checkMatches(ctx, rank_, src, tag, dtype, bytes, static_cast<DType>(h.dtype), total);
          out = data;
        } else {
          auto& q = buffered_[{src, static_cast<int>(h.tag)}];
          q.push_back({static_cast<DType>(h.dtype), std::vector<uint8_t>(total)});
          out = q.back().bytes.data();
        }
      }
      const size_t off = k * payload;
      if (total > off) std::memcpy(out + off, slot + kChunkHeaderBytes, std::min(payload, total - off));
      received.store(++r, std::memory_order_seq_cst);
      peers_->wake();
    }
    if (mine) return;
  }
}

}  // namespace lockstep::comm::shm
