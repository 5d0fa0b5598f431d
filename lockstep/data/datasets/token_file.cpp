#include "lockstep/data/datasets/token_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "lockstep/util/error.h"
#include "lockstep/util/file.h"

namespace lockstep::data {

TokenWidth tokenWidthFromName(const std::string& name) {
  if (name == "uint16") return TokenWidth::u16;
  if (name == "uint32") return TokenWidth::u32;
  throw ValueError(
      fmt::format("token dtype '{}' is not known: use uint16 (vocabularies up to 65536) or uint32", name));
}

const char* tokenWidthName(TokenWidth w) { return w == TokenWidth::u16 ? "uint16" : "uint32"; }

std::shared_ptr<const TokenFile> TokenFile::open(const std::string& path, TokenWidth width) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError(fmt::format("cannot open token file {}: {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    throw IoError(fmt::format("cannot stat token file {}: {}", path, std::strerror(e)));
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  const size_t w = static_cast<size_t>(width);
  if (!S_ISREG(st.st_mode) || bytes % w != 0 || bytes == 0) {
    ::close(fd);
    throw IoError(
        fmt::format("token file {} is {} bytes, not a non-empty multiple of {} ({} tokens): it is "
                    "truncated or not a token file of that dtype (write it with `lockstep data tokenize`)",
                    path, bytes, w, tokenWidthName(width)));
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  int e = errno;
  ::close(fd);
  if (p == MAP_FAILED) throw IoError(fmt::format("cannot map token file {}: {}", path, std::strerror(e)));
  auto f = std::shared_ptr<TokenFile>(new TokenFile());
  f->name_ = path;
  f->base_ = p;
  f->count_ = static_cast<int64_t>(bytes / w);
  f->width_ = width;
  f->mapped_bytes_ = bytes;
  return f;
}

std::shared_ptr<const TokenFile> TokenFile::fromTokens(std::vector<uint16_t> tokens, std::string name) {
  auto f = std::shared_ptr<TokenFile>(new TokenFile());
  f->name_ = std::move(name);
  f->owned_ = std::move(tokens);
  f->base_ = f->owned_.data();
  f->count_ = static_cast<int64_t>(f->owned_.size());
  f->width_ = TokenWidth::u16;
  return f;
}

TokenFile::~TokenFile() {
  if (mapped_bytes_ != 0) ::munmap(const_cast<void*>(base_), mapped_bytes_);
}

void TokenFile::copyTo(int64_t start, int64_t n, int64_t* out) const {
  LOCKSTEP_CHECK(start >= 0 && n >= 0 && start + n <= count_, "tokens [", start, ", ", start + n, ") of ",
                 count_);
  if (width_ == TokenWidth::u16) {
    const auto* p = static_cast<const uint16_t*>(base_) + start;
    for (int64_t i = 0; i < n; ++i) out[i] = p[i];
  } else {
    const auto* p = static_cast<const uint32_t*>(base_) + start;
    for (int64_t i = 0; i < n; ++i) out[i] = p[i];
  }
}

int64_t TokenFile::maxToken() const {
  int64_t m = 0;
  for (int64_t i = 0; i < count_; ++i) m = std::max(m, at(i));
  return m;
}

void writeTokenFile(const std::string& path, const std::vector<uint32_t>& tokens, TokenWidth width) {
  std::string bytes(tokens.size() * static_cast<size_t>(width), '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    uint32_t t = tokens[i];
    if (width == TokenWidth::u16) {
      if (t > 0xFFFF) {
        throw ValueError(
            fmt::format("token {} at position {} does not fit uint16: write {} as uint32", t, i, path));
      }
      bytes[2 * i] = static_cast<char>(t & 0xFF);
      bytes[2 * i + 1] = static_cast<char>(t >> 8);
    } else {
      for (int b = 0; b < 4; ++b) bytes[4 * i + b] = static_cast<char>((t >> (8 * b)) & 0xFF);
    }
  }
  file::writeAtomic(path, bytes);
}

}  // namespace lockstep::data
