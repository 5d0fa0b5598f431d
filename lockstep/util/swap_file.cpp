#include "lockstep/util/swap_file.h"

#include <fcntl.h>
#include <liburing.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "lockstep/util/error.h"

namespace lockstep::file {

namespace {
// One request travels as chunks of at most this many bytes (the kernel caps one transfer at just
// under 2 GiB; smaller chunks also let reads and writes of different requests interleave).
constexpr size_t kChunk = size_t{64} << 20;

std::string sysError(int err) { return std::strerror(err); }
}  // namespace

struct SwapFile::Ring {
  io_uring ring{};
};

SwapFile::SwapFile(const SwapFileOptions& opts) : ring_(std::make_unique<Ring>()), bytes_(opts.bytes) {
  LOCKSTEP_ENFORCE(opts.bytes >= 0, ValueError, "SwapFile: negative size ", opts.bytes);
  std::string templ = opts.dir + (opts.dir.empty() || opts.dir.back() == '/' ? "" : "/") + opts.prefix + "-" +
                      std::to_string(::getpid()) + "-XXXXXX";
  std::vector<char> name(templ.begin(), templ.end());
  name.push_back('\0');
  direct_ = opts.direct;
  fd_ = ::mkostemp(name.data(), O_CLOEXEC | (direct_ ? O_DIRECT : 0));
  if (fd_ < 0 && direct_ && errno == EINVAL) {  // the file system has no O_DIRECT (tmpfs)
    direct_ = false;
    std::memcpy(name.data(), templ.c_str(), templ.size());
    fd_ = ::mkostemp(name.data(), O_CLOEXEC);
  }
  LOCKSTEP_ENFORCE(fd_ >= 0, IoError, "cannot create a swap file in '", opts.dir, "': ", sysError(errno),
                   " (the directory must exist and be writable)");
  path_ = name.data();
  ::unlink(path_.c_str());  // gone with the last descriptor, however the process ends
  if (opts.bytes > 0) {
    const int err = ::posix_fallocate(fd_, 0, opts.bytes);
    if (err != 0) {
      ::close(fd_);
      fd_ = -1;
      throw IoError("cannot reserve " + std::to_string(opts.bytes) + " bytes for a swap file in '" +
                    opts.dir + "': " + sysError(err) +
                    (err == ENOSPC ? " (free space there or choose another directory)" : ""));
    }
  }
  depth_ = opts.queue_depth == 0 ? 1 : opts.queue_depth;
  const int err = io_uring_queue_init(depth_, &ring_->ring, 0);
  if (err < 0) {
    ::close(fd_);
    fd_ = -1;
    throw IoError("cannot set up io_uring for the swap file in '" + opts.dir + "': " + sysError(-err) +
                  " (a kernel or container that forbids io_uring)");
  }
}

SwapFile::~SwapFile() {
  if (fd_ < 0) return;
  try {
    waitAll();
  } catch (const std::exception&) {  // errors were the waiters' to see; the file goes anyway
  }
  while (in_flight_ > 0) pump(true);
  io_uring_queue_exit(&ring_->ring);
  ::close(fd_);
}

SwapFile::Ticket SwapFile::read(int64_t offset, void* buf, size_t bytes) {
  return submit(false, offset, static_cast<char*>(buf), bytes);
}

SwapFile::Ticket SwapFile::write(int64_t offset, const void* buf, size_t bytes) {
  return submit(true, offset, static_cast<char*>(const_cast<void*>(buf)), bytes);
}

SwapFile::Ticket SwapFile::submit(bool write, int64_t offset, char* buf, size_t bytes) {
  LOCKSTEP_CHECK(offset >= 0 && offset + static_cast<int64_t>(bytes) <= bytes_, "SwapFile: [", offset, ", +",
                 bytes, ") is outside the file's ", bytes_, " bytes");
  if (direct_) {
    LOCKSTEP_CHECK(offset % kAlignment == 0 && bytes % kAlignment == 0 &&
                       reinterpret_cast<uintptr_t>(buf) % kAlignment == 0,
                   "SwapFile: O_DIRECT needs ", kAlignment, "-byte alignment; offset ", offset, ", bytes ",
                   bytes);
  }
  const Ticket t = next_++;
  Request& r = requests_[t];
  for (size_t done = 0; done < bytes; done += kChunk) {
    const size_t n = std::min(kChunk, bytes - done);
    queued_.push_back(new Chunk{t, write, offset + static_cast<int64_t>(done), buf + done, n});
    ++r.outstanding;
  }
  pump(false);
  return t;
}

void SwapFile::pump(bool block) {
  unsigned added = 0;
  while (!queued_.empty() && in_flight_ < depth_) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_->ring);
    if (!sqe) break;
    Chunk* c = queued_.front();
    queued_.pop_front();
    if (c->write) {
      io_uring_prep_write(sqe, fd_, c->buf, static_cast<unsigned>(c->bytes),
                          static_cast<uint64_t>(c->offset));
    } else {
      io_uring_prep_read(sqe, fd_, c->buf, static_cast<unsigned>(c->bytes), static_cast<uint64_t>(c->offset));
    }
    io_uring_sqe_set_data(sqe, c);
    ++in_flight_;
    ++added;
  }
  if (added > 0) {
    const int err = io_uring_submit(&ring_->ring);
    LOCKSTEP_ENFORCE(err >= 0, IoError, "swap file '", path_, "': io_uring submit failed: ", sysError(-err));
  }
  if (!block || in_flight_ == 0) return;
  io_uring_cqe* cqe = nullptr;
  int err;
  do {
    err = io_uring_wait_cqe(&ring_->ring, &cqe);
  } while (err == -EINTR);
  LOCKSTEP_ENFORCE(err >= 0, IoError, "swap file '", path_, "': io_uring wait failed: ", sysError(-err));
  // Reap every completion that is ready.
  unsigned head;
  unsigned seen = 0;
  std::vector<std::pair<Chunk*, int>> done;
  io_uring_for_each_cqe(&ring_->ring, head, cqe) {
    done.emplace_back(static_cast<Chunk*>(io_uring_cqe_get_data(cqe)), cqe->res);
    ++seen;
  }
  io_uring_cq_advance(&ring_->ring, seen);
  for (auto& [c, res] : done) {
    --in_flight_;
    complete(c, res);
  }
}

void SwapFile::complete(Chunk* c, int res) {
  if (res == -EINTR || res == -EAGAIN) {  // try again as it was
    queued_.push_back(c);
    return;
  }
  Request& r = requests_[c->ticket];
  if (res > 0 && static_cast<size_t>(res) < c->bytes && (!direct_ || res % kAlignment == 0)) {
    (c->write ? bytes_written_ : bytes_read_) += res;
    c->offset += res;  // a short transfer: the rest goes again
    c->buf += res;
    c->bytes -= static_cast<size_t>(res);
    queued_.push_back(c);
    return;
  }
  if (res < 0 || static_cast<size_t>(res) != c->bytes) {
    if (r.error.empty()) {
      r.error = std::string(c->write ? "writing " : "reading ") + std::to_string(c->bytes) +
                " bytes at offset " + std::to_string(c->offset) + " of swap file '" + path_ + "' failed: " +
                (res < 0 ? sysError(-res) : "short transfer of " + std::to_string(res) + " bytes") +
                (res == -ENOSPC ? " (the disk is full)" : "");
    }
  } else {
    (c->write ? bytes_written_ : bytes_read_) += res;
  }
  --r.outstanding;
  delete c;
}

void SwapFile::wait(Ticket ticket) {
  auto it = requests_.find(ticket);
  if (it == requests_.end()) return;
  while (it->second.outstanding > 0) {
    pump(true);
    it = requests_.find(ticket);
  }
  const std::string error = it->second.error;
  requests_.erase(it);
  if (!error.empty()) throw IoError(error);
}

void SwapFile::waitAll() {
  std::string error;
  while (!requests_.empty()) {
    const Ticket t = requests_.begin()->first;
    try {
      wait(t);
    } catch (const IoError& e) {
      if (error.empty()) error = e.what();
    }
  }
  if (!error.empty()) throw IoError(error);
}

}  // namespace lockstep::file
