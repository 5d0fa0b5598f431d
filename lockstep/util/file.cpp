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
  syncDirectory(dir_);
}

void syncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0 && errno == EACCES) return;  // a directory one may write but not read: cannot be synced
  if (fd < 0) fail("cannot open the directory", dir);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  errno = err;
  if (rc != 0 && err != EINVAL)
    fail("cannot sync the directory (the files just renamed into it may not last)", dir);
}

std::string readAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open", path);
  std::ostringstream os;
  os << in.rdbuf();
  if (in.bad()) fail("cannot read", path);
  return os.str();
}

AppendedLines openLinesForAppend(const std::string& path) {
  AppendedLines out;
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  out.fresh = ec || size == 0;
  if (!out.fresh) {
    // The last newline, read back from the end a block at a time (a log of any length).
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("cannot open", path);
    uint64_t end = size, keep = 0;
    bool found = false;
    char block[4096];
    while (end > 0 && !found) {
      const uint64_t begin = end > sizeof(block) ? end - sizeof(block) : 0;
      in.seekg(static_cast<std::streamoff>(begin));
      if (!in.read(block, static_cast<std::streamsize>(end - begin))) fail("cannot read", path);
      for (uint64_t i = end - begin; i-- > 0;) {
        if (block[i] == '\n') {
          keep = begin + i + 1;
          found = true;
          break;
        }
      }
      end = begin;
    }
    if (keep != size) {
      std::filesystem::resize_file(path, keep, ec);
      if (ec) throw IoError("cannot cut the unfinished last line of '" + path + "': " + ec.message());
      out.dropped = static_cast<int64_t>(size - keep);
      out.fresh = keep == 0;
    }
  }
  out.file = std::fopen(path.c_str(), "a");
  if (!out.file) fail("cannot open", path);
  return out;
}

namespace {
std::filesystem::file_status statusOf(const std::string& path) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (ec && st.type() != std::filesystem::file_type::not_found)
    throw IoError("cannot look at '" + path + "': " + ec.message());
  return st;
}
}  // namespace

bool exists(const std::string& path) { return std::filesystem::exists(statusOf(path)); }

bool isDirectory(const std::string& path) { return std::filesystem::is_directory(statusOf(path)); }

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
