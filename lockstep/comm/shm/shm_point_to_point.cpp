#include "lockstep/comm/shm/shm_point_to_point.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "lockstep/comm/op_watch.h"
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

constexpr std::chrono::milliseconds kCheckInterval{20};  // a stuck transfer's peer and deadline

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
      peers_(peers) {
  for (size_t j = 0; j < regions_.size(); ++j) {
    out_.push_back(std::make_unique<Outbox>());
    in_.push_back(std::make_unique<Inbox>());
  }
}

ShmPointToPoint::~ShmPointToPoint() {
  {
    std::lock_guard lock(thread_mutex_);
    stop_ = true;
  }
  thread_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

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

size_t ShmPointToPoint::chunksOf(size_t bytes) const {
  const size_t payload = payloadBytes();
  return std::max<size_t>(1, (bytes + payload - 1) / payload);  // an empty message is one chunk
}

namespace {
// A receive's message of the wrong size or dtype (the two ranks disagree on the call): its error.
std::exception_ptr mismatch(const OpContext& ctx, int rank, int src, int tag, DType want, size_t want_bytes,
                            DType got, size_t got_bytes) {
  if (got == want && got_bytes == want_bytes) return nullptr;
  return std::make_exception_ptr(PeerError(
      ::lockstep::detail::concat(ctx.name, " on rank ", rank, ": rank ", src, "'s message with tag ", tag,
                                 " is ", got_bytes / dtypeSize(got), " x ", dtypeName(got),
                                 " but this recv expects ", want_bytes / dtypeSize(want), " x ",
                                 dtypeName(want), "; a send and its recv must agree on count and dtype")));
}

// Throws a copy of a transfer's error, made on this thread: the transfer (and its exception_ptr)
// may be let go last by the progress thread while this thread still handles the exception.
[[noreturn]] void rethrowCopy(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const TimeoutError& e) {
    throw TimeoutError(e.what());
  } catch (const PeerError& e) {
    throw PeerError(e.what());
  } catch (const std::exception& e) {
    throw Error(e.what());
  }
}

std::string waitingFor(const Transfer& t) {
  return ::lockstep::detail::concat("rank ", t.peer, t.sending ? " to receive" : " to send", " (tag ", t.tag,
                                    ")");
}
}  // namespace

void ShmPointToPoint::post(const OpContext& ctx, const std::shared_ptr<Transfer>& t) {
  {
    std::lock_guard lock(broken_mutex_);
    LOCKSTEP_ENFORCE(broken_.empty(), PeerError, ctx.name,
                     ": not run because an earlier send or recv of this process group failed: ", broken_);
  }
  t->ctx = ctx;
  pending_.fetch_add(1, std::memory_order_acq_rel);
  if (t->sending) {
    {
      std::lock_guard lock(out_[t->peer]->mutex);
      out_[t->peer]->queue.push_back(t);
    }
    progressSends(t->peer);
  } else {
    {
      Inbox& in = *in_[t->peer];
      std::lock_guard lock(in.mutex);
      auto it = in.unexpected.find(t->tag);
      if (it == in.unexpected.end()) {
        in.posted.push_back(t);
      } else {
        // The oldest message with this tag read ahead of its receive: now this receive's.
        std::shared_ptr<Incoming> m = std::move(it->second.front());
        it->second.pop_front();
        if (it->second.empty()) in.unexpected.erase(it);
        if (std::exception_ptr e =
                mismatch(ctx, rank_, t->peer, t->tag, t->dtype, t->bytes, m->dtype, m->bytes)) {
          failLocked(*t, e);
          m->dropped = true;  // drained, if still arriving, and forgotten
        } else {
          m->into = t;
          if (m->complete()) deliver(*m);
        }
      }
    }
    progressReceives(t->peer);
  }
  if (t->finished()) return;
  startProgressThread();
  thread_cv_.notify_all();
}

bool ShmPointToPoint::progressSends(int peer) {
  Outbox& o = *out_[peer];
  std::lock_guard lock(o.mutex);
  const size_t payload = payloadBytes();
  std::atomic_ref<uint64_t> sent = chunksSent(rank_, peer);
  std::atomic_ref<uint64_t> received = chunksReceived(peer, rank_);
  uint64_t s = sent.load(std::memory_order_relaxed);
  bool moved = false;
  while (!o.queue.empty()) {
    Transfer& t = *o.queue.front();
    const size_t chunks = chunksOf(t.bytes);
    while (t.chunks_done < chunks && s - received.load(std::memory_order_acquire) < slots_) {
      const size_t k = t.chunks_done;
      uint8_t* slot = chunkSlot(rank_, peer, s);
      ChunkHeader h{t.tag, t.bytes, static_cast<uint32_t>(t.dtype), static_cast<uint32_t>(k)};
      std::memcpy(slot, &h, sizeof(h));
      const size_t off = k * payload;
      if (t.bytes > off)
        std::memcpy(slot + kChunkHeaderBytes, t.data + off, std::min(payload, t.bytes - off));
      sent.store(++s, std::memory_order_seq_cst);
      ++t.chunks_done;
      moved = true;
    }
    if (t.chunks_done < chunks) break;
    std::shared_ptr<Transfer> done = std::move(o.queue.front());
    o.queue.pop_front();
    finishLocked(*done);
  }
  if (moved) peers_->wake();
  return moved;
}

bool ShmPointToPoint::progressReceives(int peer) {
  Inbox& in = *in_[peer];
  std::lock_guard lock(in.mutex);
  const size_t payload = payloadBytes();
  std::atomic_ref<uint64_t> sent = chunksSent(peer, rank_);
  std::atomic_ref<uint64_t> received = chunksReceived(rank_, peer);
  uint64_t r = received.load(std::memory_order_relaxed);
  bool moved = false;
  while (sent.load(std::memory_order_acquire) > r) {
    const uint8_t* slot = chunkSlot(peer, rank_, r);
    ChunkHeader h;
    std::memcpy(&h, slot, sizeof(h));
    if (!in.reading) {
      // A new message: the oldest receive posted for its tag takes it, else it is held for one.
      LOCKSTEP_CHECK(h.index == 0, "shm point to point: chunk ", h.index, " from rank ", peer,
                     " where a message's first chunk was due");
      auto m = std::make_shared<Incoming>();
      m->tag = static_cast<int>(h.tag);
      m->dtype = static_cast<DType>(h.dtype);
      m->bytes = h.bytes;
      m->chunks = chunksOf(m->bytes);
      auto it = std::find_if(in.posted.begin(), in.posted.end(),
                             [&](const std::shared_ptr<Transfer>& t) { return t->tag == m->tag; });
      if (it != in.posted.end()) {
        std::shared_ptr<Transfer> t = std::move(*it);
        in.posted.erase(it);
        if (std::exception_ptr e =
                mismatch(t->ctx, rank_, peer, t->tag, t->dtype, t->bytes, m->dtype, m->bytes)) {
          failLocked(*t, e);  // the message is drained and dropped
          m->dropped = true;
        } else {
          m->into = std::move(t);
          m->direct = true;
        }
      } else {
        m->held.resize(m->bytes);
        in.unexpected[m->tag].push_back(m);
      }
      in.reading = std::move(m);
    }
    Incoming& m = *in.reading;
    LOCKSTEP_CHECK(h.index == m.chunks_read, "shm point to point: chunk ", h.index, " from rank ", peer,
                   " where chunk ", m.chunks_read, " was due");
    const size_t off = m.chunks_read * payload;
    uint8_t* dst = m.destination();
    if (dst && m.bytes > off)
      std::memcpy(dst + off, slot + kChunkHeaderBytes, std::min(payload, m.bytes - off));
    received.store(++r, std::memory_order_seq_cst);
    ++m.chunks_read;
    moved = true;
    if (m.complete()) {
      std::shared_ptr<Incoming> done = std::move(in.reading);
      deliver(*done);
    }
  }
  if (moved) peers_->wake();
  return moved;
}

void ShmPointToPoint::deliver(Incoming& m) {
  if (!m.into || m.into->finished()) return;  // held for a later receive, or its receive failed
  if (!m.direct && m.bytes > 0) std::memcpy(m.into->data, m.held.data(), m.bytes);
  m.held = {};
  finishLocked(*m.into);
}

void ShmPointToPoint::finishLocked(Transfer& t) {
  t.state.store(Transfer::State::done, std::memory_order_release);
  pending_.fetch_sub(1, std::memory_order_acq_rel);
}

void ShmPointToPoint::failLocked(Transfer& t, std::exception_ptr error) {
  if (t.finished()) return;
  t.error = std::move(error);
  {
    std::lock_guard lock(broken_mutex_);
    if (broken_.empty()) {
      try {
        std::rethrow_exception(t.error);
      } catch (const std::exception& e) {
        broken_ = e.what();
      } catch (...) {
        broken_ = "unknown error";
      }
    }
  }
  t.state.store(Transfer::State::failed, std::memory_order_release);
  pending_.fetch_sub(1, std::memory_order_acq_rel);
  peers_->abort();  // peers waiting for this rank fail at once
}

void ShmPointToPoint::fail(Transfer& t, std::exception_ptr error) {
  if (t.sending) {
    Outbox& o = *out_[t.peer];
    std::lock_guard lock(o.mutex);
    std::erase_if(o.queue, [&](const std::shared_ptr<Transfer>& q) { return q.get() == &t; });
    failLocked(t, std::move(error));
  } else {
    Inbox& in = *in_[t.peer];
    std::lock_guard lock(in.mutex);
    std::erase_if(in.posted, [&](const std::shared_ptr<Transfer>& q) { return q.get() == &t; });
    failLocked(t, std::move(error));  // a message arriving for it is dropped (deliver)
  }
}

bool ShmPointToPoint::await(Transfer& t, std::chrono::milliseconds limit) {
  if (!t.finished()) {
    OpWatchScope watched(t.ctx);  // the agent's watchdog sees the wait
    const auto until = std::chrono::steady_clock::now() + std::min(limit, Work::kForever);
    bool limited = false;
    std::exception_ptr broken;  // from the channel itself: thrown out of the wait, not inside it
    try {
      peers_->waitForPeer(t.ctx, t.peer, waitingFor(t), [&] {
        if (t.finished()) return true;
        try {
          progress(t);
        } catch (...) {
          broken = std::current_exception();
          return true;
        }
        if (t.finished()) return true;
        if (std::chrono::steady_clock::now() < until) return false;
        limited = true;
        return true;
      });
      if (broken) std::rethrow_exception(broken);
    } catch (...) {  // the peer died or aborted, the op's deadline passed, or the stream is broken
      fail(t, std::current_exception());
    }
    if (limited && !t.finished()) return false;
  }
  if (t.state.load(std::memory_order_acquire) == Transfer::State::failed) rethrowCopy(t.error);
  return true;
}

void ShmPointToPoint::startProgressThread() {
  std::lock_guard lock(thread_mutex_);
  if (!thread_.joinable()) thread_ = std::thread([this] { progressLoop(); });
}

void ShmPointToPoint::progressLoop() {
  auto next_check = std::chrono::steady_clock::now();
  while (true) {
    {
      std::unique_lock lock(thread_mutex_);
      thread_cv_.wait(lock, [&] { return stop_ || pending_.load(std::memory_order_acquire) > 0; });
      if (pending_.load(std::memory_order_acquire) == 0) return;  // stopping, and nothing is left
    }
    // Something is pending: advance every channel that has a transfer, then sleep until a rank
    // stores something (every store wakes sleepers), at most one check interval.
    const uint32_t count = peers_->sleepBegin();
    bool moved = false;
    try {
      for (size_t j = 0; j < regions_.size(); ++j) {
        if (static_cast<int>(j) == rank_) continue;
        moved |= progressSends(static_cast<int>(j));  // nothing to do without sends
        if (hasReceives(static_cast<int>(j))) moved |= progressReceives(static_cast<int>(j));
      }
    } catch (...) {
      failAll(std::current_exception());
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_check) {
      failStuck();
      next_check = now + kCheckInterval;
    }
    peers_->sleepEnd(count, moved || pending_.load(std::memory_order_acquire) == 0
                                ? std::chrono::milliseconds(0)
                                : kCheckInterval);
  }
}

bool ShmPointToPoint::hasReceives(int peer) {
  Inbox& in = *in_[peer];
  std::lock_guard lock(in.mutex);
  return !in.posted.empty() || in.reading != nullptr;
}

void ShmPointToPoint::failStuck() {
  std::vector<std::shared_ptr<Transfer>> waiting;
  for (size_t j = 0; j < regions_.size(); ++j) {
    {
      std::lock_guard lock(out_[j]->mutex);
      waiting.insert(waiting.end(), out_[j]->queue.begin(), out_[j]->queue.end());
    }
    Inbox& in = *in_[j];
    std::lock_guard lock(in.mutex);
    waiting.insert(waiting.end(), in.posted.begin(), in.posted.end());
    if (in.reading && in.reading->into) waiting.push_back(in.reading->into);
  }
  for (const auto& t : waiting) {
    if (t->finished()) continue;
    try {
      peers_->checkPeer(t->ctx, t->peer, waitingFor(*t));
    } catch (...) {
      fail(*t, std::current_exception());
    }
  }
}

void ShmPointToPoint::failAll(std::exception_ptr error) {
  for (size_t j = 0; j < regions_.size(); ++j) {
    {
      Outbox& o = *out_[j];
      std::lock_guard lock(o.mutex);
      for (auto& t : o.queue) failLocked(*t, error);
      o.queue.clear();
    }
    Inbox& in = *in_[j];
    std::lock_guard lock(in.mutex);
    for (auto& t : in.posted) failLocked(*t, error);
    in.posted.clear();
    if (in.reading && in.reading->into) failLocked(*in.reading->into, error);
  }
}

}  // namespace lockstep::comm::shm
