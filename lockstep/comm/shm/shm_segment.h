#pragma once
// One POSIX shared memory segment (shm_open + mmap), owned (created, later unlinked) or opened.
#include <cstddef>
#include <string>

namespace lockstep::comm::shm {

class ShmSegment {
 public:
  /// Creates name (O_EXCL) with bytes zeroed bytes and maps it. IoError naming the segment and
  /// what to do (e.g. /dev/shm full) on failure.
  static ShmSegment create(const std::string& name, size_t bytes);
  /// Maps an existing segment of bytes bytes.
  static ShmSegment open(const std::string& name, size_t bytes);
  /// Unlinks this user's segments named `prefix`<pid>_... in /dev/shm whose creating process is
  /// gone and that are older than a minute: what a rank killed while its group was being set up
  /// (between creating its segment and every peer mapping it) left. Returns how many.
  static int removeLeftovers(const std::string& prefix);

  ShmSegment() = default;
  ShmSegment(ShmSegment&& o) noexcept;
  ShmSegment& operator=(ShmSegment&& o) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  /// Unmaps; unlinks too when this instance created the segment and unlink() was not called.
  ~ShmSegment();

  /// Removes the name (the mapping stays valid). Idempotent.
  void unlink();
  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  void* data_ = nullptr;
  size_t size_ = 0;
  bool owner_ = false;
};

/// This process's pid namespace, as digits (the inode /proc/self/ns/pid names; "0" when it cannot
/// be read): segment names carry it, so that leftovers are judged by pids of the same namespace.
std::string pidNamespaceTag();

}  // namespace lockstep::comm::shm
