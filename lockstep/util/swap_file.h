#pragma once
// A scratch file for data that does not fit in memory (ZeRO's NVMe offload keeps optimizer states
// in one): asynchronous reads and writes at offsets through io_uring (liburing), with O_DIRECT
// where the file system allows it, so the bytes bypass the page cache (which would otherwise hold
// a copy of everything swapped out, the memory the offload is there to save).
//
// The file is created under a directory and unlinked at once: it never outlives the process, even
// one that is killed; `df` shows its blocks while it is open, `ls` does not show it. Its full size
// is reserved up front (fallocate), so a disk without the room fails at creation, not mid-run.
//
// With O_DIRECT, buffers, offsets and lengths must be multiples of kAlignment; direct() says
// whether it is in effect (it is not on file systems without it, e.g. tmpfs).
//
// Not thread-safe: one thread submits and waits. The destructor waits for what is in flight.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>

namespace lockstep::file {

struct SwapFileOptions {
  /// The directory to create the file in (must exist and be writable).
  std::string dir;
  /// The start of the file's name (a unique suffix is added), e.g. "lockstep-zero-rank0".
  std::string prefix = "lockstep-swap";
  /// Bytes to reserve.
  int64_t bytes = 0;
  /// Try O_DIRECT first (falls back to buffered I/O where the file system refuses it).
  bool direct = true;
  /// io_uring submission queue entries: how many chunks may be in flight at once.
  unsigned queue_depth = 64;
};

class SwapFile {
 public:
  static constexpr size_t kAlignment = 4096;
  using Ticket = uint64_t;

  /// IoError naming opts.dir when the directory cannot hold the file (missing, not writable, not
  /// enough free space) or io_uring cannot be set up.
  explicit SwapFile(const SwapFileOptions& opts);
  ~SwapFile();
  SwapFile(const SwapFile&) = delete;
  SwapFile& operator=(const SwapFile&) = delete;

  /// Starts reading bytes at offset into buf (kept alive and untouched until wait()).
  Ticket read(int64_t offset, void* buf, size_t bytes);
  /// Starts writing bytes from buf at offset (buf kept alive and unchanged until wait()).
  Ticket write(int64_t offset, const void* buf, size_t bytes);
  /// Blocks until the request is done; IoError naming the file on a failed or short transfer
  /// (ENOSPC included). A ticket already waited for returns at once.
  void wait(Ticket ticket);
  /// Waits for every request in flight.
  void waitAll();

  bool direct() const { return direct_; }
  /// The name the file had in its directory (it is unlinked): for messages.
  const std::string& path() const { return path_; }
  int64_t size() const { return bytes_; }
  /// Bytes moved so far, each way (for bandwidth figures).
  int64_t bytesRead() const { return bytes_read_; }
  int64_t bytesWritten() const { return bytes_written_; }

 private:
  struct Chunk {
    Ticket ticket;
    bool write;
    int64_t offset;
    char* buf;
    size_t bytes;
  };
  struct Request {
    int outstanding = 0;
    std::string error;
  };
  Ticket submit(bool write, int64_t offset, char* buf, size_t bytes);
  /// Submits queued chunks while the ring has room; then, when block, reaps at least one completion.
  void pump(bool block);
  void complete(Chunk* chunk, int res);

  struct Ring;
  std::unique_ptr<Ring> ring_;
  int fd_ = -1;
  bool direct_ = false;
  std::string path_;
  int64_t bytes_ = 0;
  unsigned depth_ = 0;
  unsigned in_flight_ = 0;
  Ticket next_ = 1;
  std::deque<Chunk*> queued_;
  std::unordered_map<Ticket, Request> requests_;
  int64_t bytes_read_ = 0, bytes_written_ = 0;
};

}  // namespace lockstep::file
