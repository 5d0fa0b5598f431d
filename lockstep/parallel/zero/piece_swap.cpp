#include "lockstep/parallel/zero/piece_swap.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "lockstep/util/error.h"

namespace lockstep::parallel {

using file::SwapFile;

namespace {
// Each bounce buffer: large enough to keep the disk busy, small beside a layer.
constexpr size_t kBounceBytes = size_t{16} << 20;

size_t alignUp(size_t n) {
  return (n + SwapFile::kAlignment - 1) / SwapFile::kAlignment * SwapFile::kAlignment;
}
}  // namespace

ZeroPieceSwap::ZeroPieceSwap(std::vector<Tensor> pieces, const std::string& dir, const std::string& prefix,
                             const std::string& key, bool zeros) {
  int64_t total = 0;
  size_t largest = 0;
  for (Tensor& t : pieces) {
    LOCKSTEP_CHECK(t.isContiguous() && t.storage() && t.storage()->nbytes() == t.nbytes(),
                   "a swapped piece must own its whole storage");
    entries_.push_back({t, total, 0, zeros, false});
    total += static_cast<int64_t>(alignUp(t.nbytes()));
    largest = std::max(largest, t.nbytes());
  }
  bounce_bytes_ = std::min(kBounceBytes, alignUp(std::max<size_t>(largest, 1)));
  bounce_ = {static_cast<char*>(std::aligned_alloc(SwapFile::kAlignment, 2 * bounce_bytes_)), std::free};
  LOCKSTEP_ENFORCE(bounce_ != nullptr, Error, key, ": cannot allocate ", 2 * bounce_bytes_,
                   " bytes of swap buffers");
  file::SwapFileOptions fo;
  fo.dir = dir;
  fo.prefix = prefix;
  fo.bytes = std::max<int64_t>(total, SwapFile::kAlignment);
  try {
    file_ = std::make_unique<SwapFile>(fo);
  } catch (const IoError& e) {
    throw IoError(key + ": " + e.what());
  }
  for (Entry& e : entries_) {
    if (!zeros && e.t.nbytes() > 0) writeOut(e);
    e.t.storage()->release();
  }
}

ZeroPieceSwap::~ZeroPieceSwap() = default;

void ZeroPieceSwap::readBack(Entry& e) {
  char* dst = static_cast<char*>(e.t.dataPtr());
  const size_t n = e.t.nbytes();
  const size_t chunks = (n + bounce_bytes_ - 1) / bounce_bytes_;
  SwapFile::Ticket ticket[2] = {0, 0};
  auto start = [&](size_t c) {
    const size_t len = std::min(bounce_bytes_, n - c * bounce_bytes_);
    ticket[c % 2] = file_->read(e.offset + static_cast<int64_t>(c * bounce_bytes_),
                                bounce_.get() + (c % 2) * bounce_bytes_, alignUp(len));
  };
  if (chunks > 0) start(0);
  for (size_t c = 0; c < chunks; ++c) {
    if (c + 1 < chunks) start(c + 1);  // the other buffer fills while this one is copied out
    file_->wait(ticket[c % 2]);
    const size_t len = std::min(bounce_bytes_, n - c * bounce_bytes_);
    std::memcpy(dst + c * bounce_bytes_, bounce_.get() + (c % 2) * bounce_bytes_, len);
  }
}

void ZeroPieceSwap::writeOut(Entry& e) {
  const char* src = static_cast<const char*>(e.t.dataPtr());
  const size_t n = e.t.nbytes();
  SwapFile::Ticket ticket[2] = {0, 0};
  for (size_t c = 0; c * bounce_bytes_ < n; ++c) {
    char* buf = bounce_.get() + (c % 2) * bounce_bytes_;
    if (ticket[c % 2]) file_->wait(ticket[c % 2]);  // the write two chunks back used this buffer
    const size_t len = std::min(bounce_bytes_, n - c * bounce_bytes_);
    std::memcpy(buf, src + c * bounce_bytes_, len);
    ticket[c % 2] = file_->write(e.offset + static_cast<int64_t>(c * bounce_bytes_), buf, alignUp(len));
  }
  for (SwapFile::Ticket t : ticket) {
    if (t) file_->wait(t);
  }
}

void ZeroPieceSwap::acquire(size_t i, bool contents) {
  Entry& e = entries_.at(i);
  if (e.pins++ > 0) return;
  e.t.storage()->materialize();
  if (!contents) return;
  if (e.zero) {
    e.t.zero();
  } else if (e.t.nbytes() > 0) {
    readBack(e);
  }
}

void ZeroPieceSwap::release(size_t i, bool changed) {
  Entry& e = entries_.at(i);
  LOCKSTEP_CHECK(e.pins > 0, "ZeroPieceSwap: release without acquire");
  e.changed = e.changed || changed;
  if (--e.pins > 0) return;
  if (e.changed && e.t.nbytes() > 0) {
    writeOut(e);
    e.zero = false;
  }
  e.changed = false;
  e.t.storage()->release();
}

void ZeroPieceSwap::setZero() {
  for (Entry& e : entries_) {
    e.zero = true;
    e.changed = false;
    if (e.pins > 0) e.t.zero();
  }
}

int64_t ZeroPieceSwap::residentBytes() const {
  int64_t n = 0;
  for (const Entry& e : entries_) {
    if (e.pins > 0) n += static_cast<int64_t>(e.t.nbytes());
  }
  return n;
}

int64_t ZeroPieceSwap::totalBytes() const {
  int64_t n = 0;
  for (const Entry& e : entries_) n += static_cast<int64_t>(e.t.nbytes());
  return n;
}

}  // namespace lockstep::parallel
