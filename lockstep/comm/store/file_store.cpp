#include "lockstep/comm/store/file_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "lockstep/util/error.h"

namespace lockstep::comm {
namespace {

constexpr uint8_t kOpSet = 0;
constexpr uint8_t kOpDelete = 1;
constexpr char kCleanupKey[] = "__lockstep_filestore_finished_workers";

void putU32(std::vector<uint8_t>& out, uint32_t v) {
  uint8_t b[4];
  std::memcpy(b, &v, 4);
  out.insert(out.end(), b, b + 4);
}

}  // namespace

class FileStore::Lock {
 public:
  explicit Lock(FileStore& s) : s_(s), guard_(s.mutex_) {
    while (::flock(s_.fd_, LOCK_EX) != 0) {
      LOCKSTEP_ENFORCE(errno == EINTR, IoError, "FileStore: cannot lock '", s_.path_,
                       "': ", std::strerror(errno));
    }
  }
  ~Lock() { ::flock(s_.fd_, LOCK_UN); }

 private:
  FileStore& s_;
  std::lock_guard<std::mutex> guard_;
};

FileStore::FileStore(std::string path, int num_workers) : path_(std::move(path)), num_workers_(num_workers) {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  LOCKSTEP_ENFORCE(fd_ >= 0, IoError, "FileStore: cannot open '", path_, "': ", std::strerror(errno),
                   "; the directory must exist and be writable by every rank");
}

FileStore::~FileStore() {
  try {
    if (num_workers_ > 0) {
      Lock lock(*this);
      refreshLocked();
      if (addLocked(kCleanupKey, 1) >= num_workers_) ::unlink(path_.c_str());
    }
  } catch (...) {
    // Destructors must not throw; a leftover file is harmless.
  }
  ::close(fd_);
}

void FileStore::refreshLocked() {
  off_t end = ::lseek(fd_, 0, SEEK_END);
  LOCKSTEP_ENFORCE(end >= 0, IoError, "FileStore: cannot seek '", path_, "': ", std::strerror(errno));
  if (end < offset_) {  // the file was truncated/recreated: start over
    offset_ = 0;
    cache_.clear();
  }
  if (end == offset_) return;
  std::vector<uint8_t> buf(static_cast<size_t>(end - offset_));
  size_t got = 0;
  while (got < buf.size()) {
    ssize_t n = ::pread(fd_, buf.data() + got, buf.size() - got, offset_ + static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    LOCKSTEP_ENFORCE(n > 0, IoError, "FileStore: cannot read '", path_,
                     "': ", n == 0 ? "unexpected end of file" : std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  size_t pos = 0;
  auto readU32 = [&](uint32_t& v) {
    if (pos + 4 > buf.size()) return false;
    std::memcpy(&v, buf.data() + pos, 4);
    pos += 4;
    return true;
  };
  while (pos < buf.size()) {
    size_t start = pos;
    uint8_t op = buf[pos++];
    uint32_t klen = 0, vlen = 0;
    bool ok = readU32(klen) && pos + klen <= buf.size();
    std::string key;
    if (ok) {
      key.assign(reinterpret_cast<const char*>(buf.data() + pos), klen);
      pos += klen;
      ok = readU32(vlen) && pos + vlen <= buf.size();
    }
    LOCKSTEP_ENFORCE(ok && (op == kOpSet || op == kOpDelete), IoError, "FileStore: '", path_,
                     "' is corrupt at byte ", offset_ + static_cast<int64_t>(start),
                     "; delete it (no job may be using it) and restart");
    if (op == kOpSet) {
      cache_[key].assign(buf.begin() + static_cast<ptrdiff_t>(pos),
                         buf.begin() + static_cast<ptrdiff_t>(pos + vlen));
    } else {
      cache_.erase(key);
    }
    pos += vlen;
  }
  offset_ = end;
}

void FileStore::appendLocked(uint8_t op, const std::string& key, const std::vector<uint8_t>& value) {
  std::vector<uint8_t> rec;
  rec.reserve(9 + key.size() + value.size());
  rec.push_back(op);
  putU32(rec, static_cast<uint32_t>(key.size()));
  rec.insert(rec.end(), key.begin(), key.end());
  putU32(rec, static_cast<uint32_t>(value.size()));
  rec.insert(rec.end(), value.begin(), value.end());
  off_t end = ::lseek(fd_, 0, SEEK_END);
  size_t put = 0;
  while (put < rec.size()) {
    ssize_t n = ::pwrite(fd_, rec.data() + put, rec.size() - put, end + static_cast<off_t>(put));
    if (n < 0 && errno == EINTR) continue;
    LOCKSTEP_ENFORCE(n > 0, IoError, "FileStore: cannot write '", path_, "': ", std::strerror(errno));
    put += static_cast<size_t>(n);
  }
  offset_ = end + static_cast<off_t>(rec.size());
  if (op == kOpSet) {
    cache_[key] = value;
  } else {
    cache_.erase(key);
  }
}

void FileStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  Lock lock(*this);
  refreshLocked();
  appendLocked(kOpSet, key, value);
}

std::vector<uint8_t> FileStore::get(const std::string& key) {
  wait({key}, timeout_);
  Lock lock(*this);
  refreshLocked();
  auto it = cache_.find(key);
  LOCKSTEP_ENFORCE(it != cache_.end(), PeerError, "FileStore '", path_, "': key '", key,
                   "' was deleted while get() waited for it");
  return it->second;
}

int64_t FileStore::addLocked(const std::string& key, int64_t delta) {
  auto it = cache_.find(key);
  int64_t v = detail::addToCounter(key, it == cache_.end() ? std::vector<uint8_t>{} : it->second, delta);
  appendLocked(kOpSet, key, detail::formatCounter(v));
  return v;
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  Lock lock(*this);
  refreshLocked();
  return addLocked(key, delta);
}

std::vector<uint8_t> FileStore::compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                           const std::vector<uint8_t>& desired) {
  Lock lock(*this);
  refreshLocked();
  auto it = cache_.find(key);
  if (it == cache_.end()) {
    if (!expected.empty()) return {};
  } else if (it->second != expected) {
    return it->second;
  }
  appendLocked(kOpSet, key, desired);
  return desired;
}

std::vector<std::string> FileStore::missing(const std::vector<std::string>& keys) {
  Lock lock(*this);
  refreshLocked();
  std::vector<std::string> out;
  for (const auto& k : keys) {
    if (cache_.find(k) == cache_.end()) out.push_back(k);
  }
  return out;
}

void FileStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  while (true) {
    auto miss = missing(keys);
    if (miss.empty()) return;
    if (std::chrono::steady_clock::now() >= deadline) {
      throw TimeoutError(
          ::lockstep::detail::concat("FileStore '", path_, "': timed out after ", timeout.count(),
                                     " ms waiting for keys ", detail::joinKeys(miss),
                                     "; a peer did not publish them (did it start, and does it "
                                     "use the same file?)"));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
}

bool FileStore::check(const std::vector<std::string>& keys) { return missing(keys).empty(); }

bool FileStore::deleteKey(const std::string& key) {
  Lock lock(*this);
  refreshLocked();
  if (cache_.find(key) == cache_.end()) return false;
  appendLocked(kOpDelete, key, {});
  return true;
}

int64_t FileStore::numKeys() {
  Lock lock(*this);
  refreshLocked();
  return static_cast<int64_t>(cache_.size() - cache_.count(kCleanupKey));
}

}  // namespace lockstep::comm
