#pragma once
// Point to point of the shm backend. Each ordered pair of ranks has a channel in the sender's
// segment: two counter lines (chunks sent on it, written by the sender; chunks received, written
// by the channel's receiver in its own segment's channel back to the sender), then `slots` chunk
// slots of `slot_bytes`, each a 64-byte chunk header (tag, message size, dtype, chunk index) and
// payload. A send returns once its last chunk is in the channel. Internal.
#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "lockstep/comm/process_group.h"
#include "lockstep/comm/shm/shm_peers.h"

namespace lockstep::comm::shm {

/// The channels of one rank's group. Used by one thread at a time (the group's worker thread).
class ShmPointToPoint {
 public:
  /// Bytes of one rank's channels (to every rank of a group of `size`), placed in its segment.
  static size_t regionBytes(int size, size_t slot_bytes, size_t slots);

  /// regions[j]: where rank j's channels start in this process's mapping of its segment.
  /// peers is borrowed and must outlive this object.
  ShmPointToPoint(int rank, std::vector<uint8_t*> regions, size_t slot_bytes, size_t slots, ShmPeers* peers);

  /// Sends `bytes` of data to rank dst; blocks while the channel is full.
  void send(const OpContext& ctx, const uint8_t* data, size_t bytes, DType dtype, int dst, int tag);
  /// Receives the oldest unreceived message from rank src with this tag; messages with other
  /// tags read on the way are kept for later recvs. PeerError when count or dtype differ.
  void recv(const OpContext& ctx, uint8_t* data, size_t bytes, DType dtype, int src, int tag);

 private:
  uint8_t* channel(int from, int to) const;
  uint8_t* chunkSlot(int from, int to, uint64_t chunk) const;        // where chunk #chunk of the channel goes
  std::atomic_ref<uint64_t> chunksSent(int from, int to) const;      // written by from
  std::atomic_ref<uint64_t> chunksReceived(int to, int from) const;  // written by to, in to's segment
  size_t payloadBytes() const;
  // Takes a message that an earlier recv buffered; false when there is none.
  bool takeBuffered(const OpContext& ctx, uint8_t* data, size_t bytes, DType dtype, int src, int tag);

  int rank_;
  std::vector<uint8_t*> regions_;
  size_t slot_bytes_;
  size_t slots_;
  size_t channel_bytes_;
  ShmPeers* peers_;
  // Messages a recv read past while looking for its tag: (src, tag) -> oldest first.
  struct Buffered {
    DType dtype;
    std::vector<uint8_t> bytes;
  };
  std::map<std::pair<int, int>, std::deque<Buffered>> buffered_;
};

}  // namespace lockstep::comm::shm
