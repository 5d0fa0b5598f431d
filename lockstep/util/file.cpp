#include "lockstep/util/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "lockstep/util/error.h"

namespace lockstep::file {

namespace {
[[noreturn]] void fail(const std::string& what, const std::string& path) {
  throw IoError(what + " '" + path + "': " + std::strerror(errno));
}
}  // namespace

void writeAtomic(const std::string& path, std::string_view bytes) {
  writeAtomic(path, std::vector<std::string_view>{bytes});
}

void writeAtomic(const std::string& path, const std::vector<std::string_view>& pieces) {
  AtomicFile f(path);
  for (std::string_view bytes : pieces) f.append(bytes);
  f.commit();
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  std::filesystem::path p(path_);
  dir_ = p.has_parent_path() ? p.parent_path().string() : ".";
  tmp_ = (std::filesystem::path(dir_) / ("." + p.filename().string() + ".tmp.XXXXXX")).string();
  fd_ = ::mkstemp(tmp_.data());
  if (fd_ < 0) fail("cannot create a temporary file next to", path_);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void AtomicFile::append(std::string_view bytes) {
  writeAt(append_at_, bytes);
  append_at_ += bytes.size();
}

void AtomicFile::writeAt(uint64_t offset, std::string_view bytes) {
  LOCKSTEP_CHECK(fd_ >= 0, "AtomicFile: write after commit");
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::pwrite(fd_, bytes.data() + off, bytes.size() - off, static_cast<off_t>(offset + off));
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("cannot write", path_);
    }
    off += static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  LOCKSTEP_CHECK(fd_ >= 0, "AtomicFile: commit twice");
  if (::fchmod(fd_, 0644) != 0 || ::fsync(fd_) != 0) fail("cannot sync", path_);
  ::close(fd_);
  fd_ = -1;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp_.c_str());
    errno = err;
    fail("cannot rename a temporary file onto", path_);
  }
  int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

std::string readAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open", path);
  std::ostringstream os;
  os << in.rdbuf();
  if (in.bad()) fail("cannot read", path);
  return os.str();
}

bool exists(const std::string& path) { return std::filesystem::exists(path); }

void makeDirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) throw IoError("cannot create directory '" + path + "': " + ec.message());
}

uint32_t crc32(std::string_view bytes, uint32_t start) {
  uLong c = start;
  // zlib takes uInt lengths: feed large buffers in pieces.
  size_t off = 0;
  while (off < bytes.size()) {
    uInt n = static_cast<uInt>(std::min<size_t>(bytes.size() - off, 1u << 30));
    c = ::crc32(c, reinterpret_cast<const Bytef*>(bytes.data() + off), n);
    off += n;
  }
  return static_cast<uint32_t>(c);
}

}  // namespace lockstep::file
