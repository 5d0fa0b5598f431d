#pragma once
// Collectives on Tensors: comm/ moves typed buffers and knows nothing of tensors; these adapt.
// Every function here is collective over pg (all ranks call it in the same order).
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/comm/process_group.h"
#include "lockstep/tensor/tensor.h"

namespace lockstep::parallel {

/// Where t's elements live, for a collective's options: host memory, or a GPU with the current
/// stream of that device (the stream t's producers queued on; NCCL's stream waits on it).
comm::BufferPlace placeOf(const Tensor& t);
/// The same for memory of `device` (its current stream).
comm::BufferPlace placeOf(const Device& device);
/// bytes from src to dst: memcpy when place is the host; for a GPU place an asynchronous copy on
/// place's stream, ordered before the ops issued there after it (a collective with the same place
/// included), in whichever direction the pointers say (each of src and dst may be that GPU's
/// memory or host memory, pinned for a truly asynchronous copy). Host memory a GPU copy reads or
/// writes must stay untouched until waitForCopies(place).
void copyBytes(void* dst, const void* src, size_t bytes, const comm::BufferPlace& place);
/// Blocks until what was queued on place's stream is done (nothing for the host).
void waitForCopies(const comm::BufferPlace& place);

/// The side streams of a GPU: one for copies down to the host, one for copies (and their gathers)
/// up from it, so that neither waits behind the other.
enum class SideLane { to_host, to_device };
/// A stream beside place's (a GPU's compute stream) for copies that should overlap the compute
/// queued there (gradients down to the host, parameters up from it): the returned place names it,
/// and its stream first waits, on the GPU, for the work queued on place so far (the producers of
/// what it copies, the last uses of memory allocated on place's stream for it). One stream per GPU
/// and lane, made for this and nothing else. Memory the side stream touches must not be reused
/// through place's stream before joinSidePlace(place, side), a host wait for the copies
/// (CopyFence), or recordSideUse. The host: place itself.
comm::BufferPlace forkSidePlace(const comm::BufferPlace& place, SideLane lane);
/// place's stream waits, on the GPU, for the work queued on side's so far: what is queued on place
/// next sees the side copies' results, and waitForCopies(place) covers them. Nothing for the host,
/// when side is place, or when side names no device.
void joinSidePlace(const comm::BufferPlace& place, const comm::BufferPlace& side);
/// t's GPU memory is read or written by work queued on side's stream so far: the caching allocator
/// hands it out again only once that work is done (torch's record_stream), so t may be dropped at
/// once. Nothing for host memory.
void recordSideUse(const Tensor& t, const comm::BufferPlace& side);

/// A mark in a place's stream: wait() blocks the host until the work queued there before record()
/// is done (a copy to host memory the host reads next), without waiting for what came after it.
/// On the host both do nothing. Not thread-safe.
class CopyFence {
 public:
  void record(const comm::BufferPlace& place);
  /// Waits for the last record(), once; then nothing until the next record().
  void wait();
  bool pending() const { return pending_; }

 private:
  std::shared_ptr<void> event_;  // a cuda::Event, made on first use
  bool pending_ = false;
};

/// In place over a dense tensor; returns the Work (the tensor must stay untouched until done).
/// defer: the caller waits at once and runs the op itself (comm::AllreduceOptions::defer).
std::shared_ptr<comm::Work> allreduce(comm::ProcessGroup& pg, Tensor& t,
                                      comm::ReduceOp op = comm::ReduceOp::sum, bool defer = false);
/// One number combined over all ranks (e.g. the slowest rank's time with ReduceOp::max). Blocks.
double allreduceScalar(comm::ProcessGroup& pg, double value, comm::ReduceOp op);
/// Copies root's tensor into every rank's (same shape and dtype everywhere). Blocks until done.
void broadcast(comm::ProcessGroup& pg, Tensor& t, int root = 0);
/// Every rank's bytes, in rank order (lengths may differ). Blocks until done.
std::vector<std::string> allgatherBytes(comm::ProcessGroup& pg, const std::string& mine);
/// Every rank learns whether any failed a local step (creating a file, say) before the next
/// collective, instead of the others waiting there for it: rethrows `failed` on the ranks that
/// failed and throws IoError(others) on the rest when any did. pg may be null (one rank).
void rethrowIfAnyRankFailed(comm::ProcessGroup* pg, std::exception_ptr failed, const std::string& others);
/// root's string on every rank. Blocks until done.
std::string broadcastBytes(comm::ProcessGroup& pg, const std::string& mine, int root = 0);

}  // namespace lockstep::parallel
