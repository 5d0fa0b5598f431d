#include "lockstep/train/checkpoint/safetensors_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "lockstep/util/error.h"

namespace lockstep::train {

namespace {

// pread until n bytes are in or the file ends; IoError naming the path otherwise.
void preadAll(int fd, void* dst, uint64_t n, uint64_t offset, const std::string& path) {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw IoError("cannot read '" + path + "': " + std::strerror(errno));
    if (got == 0) {
      throw IoError("safetensors file '" + path + "' ends at byte " + std::to_string(offset) +
                    " before its data does (truncated)");
    }
    p += got;
    n -= static_cast<uint64_t>(got);
    offset += static_cast<uint64_t>(got);
  }
}

}  // namespace

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  // O_NONBLOCK: a FIFO in the file's place would block the open (it changes nothing for a file).
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) throw IoError("cannot open '" + path + "': " + std::strerror(errno));
  try {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) throw IoError("cannot stat '" + path + "': " + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) throw IoError("'" + path + "' is not a regular file");
    const auto size = static_cast<uint64_t>(st.st_size);
    char first8[8] = {};
    if (size >= 8) preadAll(fd_, first8, 8, 0, path);
    const uint64_t hn = safetensorsHeaderLength(std::string_view(first8, size >= 8 ? 8 : 0), size, path);
    std::string json(hn, '\0');
    preadAll(fd_, json.data(), hn, 8, path);
    header_ = parseSafetensorsHeader(json, size - 8 - hn, path);
    data_start_ = 8 + hn;
    for (size_t i = 0; i < header_.entries.size(); ++i) index_.emplace(header_.entries[i].name, i);
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0) ::close(fd_);
}

SafetensorsReader::SafetensorsReader(SafetensorsReader&& o) noexcept
    : path_(std::move(o.path_)),
      fd_(o.fd_),
      data_start_(o.data_start_),
      header_(std::move(o.header_)),
      index_(std::move(o.index_)) {
  o.fd_ = -1;
}

const SafetensorsEntry& SafetensorsReader::entry(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end())
    throw IoError("safetensors file '" + path_ + "' has no tensor named '" + name + "'");
  return header_.entries[it->second];
}

void SafetensorsReader::readElements(const std::string& name, int64_t first, int64_t count, void* dst) const {
  const SafetensorsEntry& e = entry(name);
  const uint64_t elem = dtypeSize(e.dtype);
  const auto numel = static_cast<int64_t>((e.end - e.begin) / elem);
  LOCKSTEP_ENFORCE(first >= 0 && count >= 0 && first + count <= numel, ValueError, "safetensors file '",
                   path_, "': elements [", first, ", ", first + count, ") of tensor '", name,
                   "' are outside its ", numel);
  preadAll(fd_, dst, static_cast<uint64_t>(count) * elem,
           data_start_ + e.begin + static_cast<uint64_t>(first) * elem, path_);
}

Tensor SafetensorsReader::read(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  Tensor t = Tensor::empty(e.shape, e.dtype);
  if (t.numel() > 0) readElements(name, 0, t.numel(), t.dataPtr());
  return t;
}

}  // namespace lockstep::train
