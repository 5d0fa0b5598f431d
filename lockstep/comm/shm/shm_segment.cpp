#include "lockstep/comm/shm/shm_segment.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>

#include "lockstep/util/error.h"

namespace lockstep::comm::shm {

namespace {
void* mapFd(int fd, size_t bytes, const std::string& name) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  LOCKSTEP_ENFORCE(p != MAP_FAILED, IoError, "shm backend: cannot map shared memory segment '", name, "' of ",
                   bytes, " bytes: ", std::strerror(errno));
  return p;
}
}  // namespace

ShmSegment ShmSegment::create(const std::string& name, size_t bytes) {
  int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  LOCKSTEP_ENFORCE(fd >= 0, IoError, "shm backend: cannot create shared memory segment '", name,
                   "': ", std::strerror(errno), "; check that /dev/shm is mounted and writable");
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int err = errno;
    ::close(fd);
    ::shm_unlink(name.c_str());
    throw IoError(::lockstep::detail::concat("shm backend: cannot size segment '", name, "' to ", bytes,
                                             " bytes: ", std::strerror(err),
                                             "; /dev/shm may be full (df -h /dev/shm)"));
  }
  ShmSegment s;
  s.name_ = name;
  s.size_ = bytes;
  s.owner_ = true;
  try {
    s.data_ = mapFd(fd, bytes, name);
  } catch (...) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    throw;
  }
  ::close(fd);
  return s;
}

std::string pidNamespaceTag() {
  char link[64] = {};
  const ssize_t n = ::readlink("/proc/self/ns/pid", link, sizeof(link) - 1);  // "pid:[4026531836]"
  std::string digits;
  for (ssize_t i = 0; i < n; ++i)
    if (link[i] >= '0' && link[i] <= '9') digits += link[i];
  return digits.empty() ? "0" : digits;
}

int ShmSegment::removeLeftovers(const std::string& prefix) {
  int removed = 0;
  std::error_code ec;
  const auto now = std::filesystem::file_time_type::clock::now();
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
    struct stat st {};
    if (pid <= 0 || ::stat(e.path().c_str(), &st) != 0 || st.st_uid != ::geteuid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // its creator lives
    std::error_code age_ec;
    const auto written = std::filesystem::last_write_time(e.path(), age_ec);
    if (age_ec || now - written < std::chrono::minutes(1)) continue;
    if (::shm_unlink(("/" + name).c_str()) == 0) ++removed;
  }
  return removed;
}

ShmSegment ShmSegment::open(const std::string& name, size_t bytes) {
  int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
  LOCKSTEP_ENFORCE(fd >= 0, IoError, "shm backend: cannot open shared memory segment '", name,
                   "': ", std::strerror(errno),
                   "; all ranks of an shm group must run on one host (use backend gloo or auto "
                   "across hosts)");
  // Another user could have created a segment under this name (or widened its mode) to read or
  // change this job's buffers: only the job's own user's private segments are used.
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_uid == ::geteuid() && (st.st_mode & 0077) == 0 &&
      static_cast<size_t>(st.st_size) < bytes) {
    ::close(fd);
    throw PeerError(::lockstep::detail::concat("shm backend: shared memory segment '", name, "' has ",
                                               st.st_size, " bytes, this rank needs ", bytes,
                                               ": the ranks' shm settings differ (LOCKSTEP_SHM_SLOTS, "
                                               "LOCKSTEP_SHM_BLOCK_BYTES); give every rank the "
                                               "same"));
  }
  if (::fstat(fd, &st) != 0 || st.st_uid != ::geteuid() || (st.st_mode & 0077) != 0) {
    ::close(fd);
    char mode[8];
    std::snprintf(mode, sizeof mode, "0%o", static_cast<unsigned>(st.st_mode & 0777));
    throw PeerError(::lockstep::detail::concat(
        "shm backend: shared memory segment '", name, "' is owned by uid ", st.st_uid, " with mode ", mode,
        " and ", st.st_size, " bytes; this job (uid ", ::geteuid(),
        ") only maps its own segments of mode 0600 and ", bytes, " bytes: another user or job made it"));
  }
  ShmSegment s;
  s.name_ = name;
  s.size_ = bytes;
  try {
    s.data_ = mapFd(fd, bytes, name);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return s;
}

ShmSegment::ShmSegment(ShmSegment&& o) noexcept { *this = std::move(o); }

ShmSegment& ShmSegment::operator=(ShmSegment&& o) noexcept {
  if (this != &o) {
    this->~ShmSegment();
    name_ = std::move(o.name_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    owner_ = std::exchange(o.owner_, false);
  }
  return *this;
}

ShmSegment::~ShmSegment() {
  if (data_ != nullptr) ::munmap(data_, size_);
  data_ = nullptr;
  unlink();
}

void ShmSegment::unlink() {
  if (owner_) ::shm_unlink(name_.c_str());
  owner_ = false;
}

}  // namespace lockstep::comm::shm
