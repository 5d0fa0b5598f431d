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
  std::filesystem::path p(path);
  std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  std::string tmpl = (std::filesystem::path(dir) / ("." + p.filename().string() + ".tmp.XXXXXX")).string();
  int fd = ::mkstemp(tmpl.data());
  if (fd < 0) fail("cannot create a temporary file next to", path);
  for (std::string_view bytes : pieces) {
    size_t off = 0;
    while (off < bytes.size()) {
      ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
      if (n < 0) {
        if (errno == EINTR) continue;
        int err = errno;
        ::close(fd);
        ::unlink(tmpl.c_str());
        errno = err;
        fail("cannot write", path);
      }
      off += static_cast<size_t>(n);
    }
  }
  if (::fchmod(fd, 0644) != 0 || ::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    ::unlink(tmpl.c_str());
    errno = err;
    fail("cannot sync", path);
  }
  ::close(fd);
  if (::rename(tmpl.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmpl.c_str());
    errno = err;
    fail("cannot rename a temporary file onto", path);
  }
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
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
