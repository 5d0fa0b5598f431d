#pragma once
// Point to point of the shm backend. Each ordered pair of ranks has a channel in the sender's
// segment: two counter lines (chunks sent on it, written by the sender; chunks received, written
// by the channel's receiver in its own segment's channel back to the sender), then `slots` chunk
// slots of `slot_bytes`, each a 64-byte chunk header (tag, message size, dtype, chunk index) and
// payload. Internal.
//
// Progress is per peer and direction, beside the group's queue of collectives: a send or receive
// is posted (never blocks) and its transfer advances wherever the channel lets it, on the thread
// that posts it, on a thread that waits for it, or on this object's progress thread while nobody
// waits. So a receive posted ahead of its data holds no later send back (a pipeline stage asks
// for a gradient, then sends an activation), a send that fits in the channel completes as it is
// posted, and a thread waiting for its receive copies the data itself as it arrives: no hand-off
// to another thread on the way, which on a rank with one core costs a scheduler slice.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lockstep/comm/process_group.h"
#include "lockstep/comm/shm/shm_peers.h"

namespace lockstep::comm::shm {

/// One send or receive: its buffer, and how far its transfer got.
struct Transfer {
  enum class State : int { pending, done, failed };
  Transfer(bool sending, uint8_t* data, size_t bytes, DType dtype, int peer, int tag)
      : sending(sending), data(data), bytes(bytes), dtype(dtype), peer(peer), tag(tag) {}
  const bool sending;
  uint8_t* const data;
  const size_t bytes;
  const DType dtype;
  const int peer, tag;
  OpContext ctx;           // set when posted (its deadline is the transfer's)
  size_t chunks_done = 0;  // a send's chunks in the channel (under its peer's lock)
  std::atomic<State> state{State::pending};
  std::exception_ptr error;  // set before state becomes failed
  bool finished() const { return state.load(std::memory_order_acquire) != State::pending; }
};

/// The channels of one rank's group. post() is called in the group's op order (one thread at a
/// time); progress runs on any thread.
class ShmPointToPoint {
 public:
  /// Bytes of one rank's channels (to every rank of a group of `size`), placed in its segment.
  static size_t regionBytes(int size, size_t slot_bytes, size_t slots);

  /// regions[j]: where rank j's channels start in this process's mapping of its segment.
  /// peers is borrowed and must outlive this object.
  ShmPointToPoint(int rank, std::vector<uint8_t*> regions, size_t slot_bytes, size_t slots, ShmPeers* peers);
  /// Lets the transfers still pending finish (or fail at their deadlines), then stops.
  ~ShmPointToPoint();
  ShmPointToPoint(const ShmPointToPoint&) = delete;
  ShmPointToPoint& operator=(const ShmPointToPoint&) = delete;

  /// Posts t (ctx: its op) and advances it as far as the channel allows now, without blocking. A
  /// send is done once its last chunk is in the channel (a message that fits is buffered there,
  /// like MPI's eager sends). A receive takes the oldest unreceived message from t.peer with t.tag;
  /// messages with other tags read on the way are kept for later receives; PeerError (on t) when
  /// its count or dtype differ from the receive's.
  void post(const OpContext& ctx, const std::shared_ptr<Transfer>& t);
  /// Blocks until t finished, advancing its channel on this thread, and throws t's error; false
  /// when `limit` passed first (t goes on). A peer that died or aborted, or t's deadline, fails t.
  bool await(Transfer& t, std::chrono::milliseconds limit);

 private:
  struct Incoming {  // a message being read from a peer's channel, or read and not yet taken
    int tag = 0;
    DType dtype = DType::u8;
    size_t bytes = 0, chunks = 1, chunks_read = 0;
    std::shared_ptr<Transfer> into;  // the receive it goes to; null: held for a later one
    bool direct = false;             // read straight into `into` (else into `held`, copied at the end)
    bool dropped = false;            // its receive failed: read and forgotten
    std::vector<uint8_t> held;
    bool complete() const { return chunks_read == chunks; }
    uint8_t* destination() const {
      if (dropped) return nullptr;
      if (direct) return into->finished() ? nullptr : into->data;
      return const_cast<uint8_t*>(held.data());
    }
  };
  struct Outbox {  // this rank's sends to one peer
    std::mutex mutex;
    std::deque<std::shared_ptr<Transfer>> queue;  // posting order
  };
  struct Inbox {  // this rank's receives from one peer
    std::mutex mutex;
    std::deque<std::shared_ptr<Transfer>> posted;                     // not yet matched, posting order
    std::shared_ptr<Incoming> reading;                                // the message whose chunks are arriving
    std::map<int, std::deque<std::shared_ptr<Incoming>>> unexpected;  // by tag, oldest first
  };

  uint8_t* channel(int from, int to) const;
  uint8_t* chunkSlot(int from, int to, uint64_t chunk) const;        // where chunk #chunk of the channel goes
  std::atomic_ref<uint64_t> chunksSent(int from, int to) const;      // written by from
  std::atomic_ref<uint64_t> chunksReceived(int to, int from) const;  // written by to, in to's segment
  size_t payloadBytes() const;
  size_t chunksOf(size_t bytes) const;  // of a message of `bytes`

  // Advance the channel to / from peer as far as it allows; true when anything moved. Take the
  // peer's lock.
  bool progressSends(int peer);
  bool progressReceives(int peer);
  bool progress(const Transfer& t) { return t.sending ? progressSends(t.peer) : progressReceives(t.peer); }
  bool hasReceives(int peer);
  // With its peer's lock held: a finished message goes to its receive; t is done / failed (the
  // first failure breaks the group's point to point: peers are told at once, later posts refused).
  void deliver(Incoming& m);
  void finishLocked(Transfer& t);
  void failLocked(Transfer& t, std::exception_ptr error);
  void fail(Transfer& t, std::exception_ptr error);  // takes the lock; t leaves its queue
  void failAll(std::exception_ptr error);
  // The progress thread: advances every pending transfer while nobody waits for it, and fails
  // those whose peer died or whose deadline passed (failStuck).
  void progressLoop();
  void startProgressThread();  // once, at the first transfer that cannot finish when posted
  void failStuck();

  int rank_;
  std::vector<uint8_t*> regions_;
  size_t slot_bytes_;
  size_t slots_;
  size_t channel_bytes_;
  ShmPeers* peers_;
  std::vector<std::unique_ptr<Outbox>> out_;  // by peer
  std::vector<std::unique_ptr<Inbox>> in_;    // by peer
  std::atomic<int> pending_{0};               // transfers posted and not finished
  std::mutex broken_mutex_;
  std::string broken_;  // the first failure's message
  std::mutex thread_mutex_;
  std::condition_variable thread_cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace lockstep::comm::shm
