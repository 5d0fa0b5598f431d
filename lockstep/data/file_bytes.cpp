#include "lockstep/data/file_bytes.h"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "lockstep/util/error.h"

namespace lockstep::data {

namespace {
struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

std::vector<uint8_t> gunzip(const std::vector<uint8_t>& in, const std::string& path) {
  z_stream zs{};
  // 15 + 16: gzip wrapper only (the caller checked the magic).
  LOCKSTEP_ENFORCE(inflateInit2(&zs, 15 + 16) == Z_OK, IoError, path, ": cannot initialise zlib");
  std::vector<uint8_t> out;
  out.resize(std::max<size_t>(in.size() * 2, 1 << 16));
  zs.next_in = const_cast<Bytef*>(in.data());
  zs.avail_in = static_cast<uInt>(in.size());
  size_t produced = 0;
  int rc = Z_OK;
  while (true) {
    if (produced == out.size()) out.resize(out.size() * 2);
    zs.next_out = out.data() + produced;
    zs.avail_out = static_cast<uInt>(std::min<size_t>(out.size() - produced, 1u << 30));
    const uInt before = zs.avail_out;
    rc = inflate(&zs, Z_NO_FLUSH);
    produced += before - zs.avail_out;
    if (rc == Z_STREAM_END) break;
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) break;  // input ended before the stream did
    if (rc != Z_OK) break;
  }
  std::string msg = zs.msg ? zs.msg : "";
  inflateEnd(&zs);
  if (rc == Z_STREAM_END) {
    // Concatenated gzip members are legal but not used by any dataset we read; reject trailing junk.
    LOCKSTEP_ENFORCE(zs.avail_in == 0, IoError, path, ": corrupt gzip file: ", zs.avail_in,
                     " unexpected bytes after the end of the compressed stream");
    out.resize(produced);
    return out;
  }
  if (rc == Z_BUF_ERROR || (rc == Z_OK && zs.avail_in == 0)) {
    throw IoError(path + ": truncated gzip file: the compressed stream ends early after " +
                  std::to_string(produced) + " decompressed bytes; re-download or re-generate the file");
  }
  throw IoError(path + ": corrupt gzip file (" + (msg.empty() ? "zlib error " + std::to_string(rc) : msg) +
                "); re-download or re-generate the file");
}
}  // namespace

std::vector<uint8_t> readFileBytes(const std::string& path) {
  FilePtr f(std::fopen(path.c_str(), "rb"));
  LOCKSTEP_ENFORCE(f != nullptr, IoError, path, ": cannot open for reading: ", std::strerror(errno));
  std::vector<uint8_t> bytes;
  uint8_t buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f.get())) > 0) bytes.insert(bytes.end(), buf, buf + n);
  LOCKSTEP_ENFORCE(!std::ferror(f.get()), IoError, path, ": read error: ", std::strerror(errno));
  return bytes;
}

std::vector<uint8_t> readMaybeGzipFile(const std::string& path) {
  std::vector<uint8_t> bytes = readFileBytes(path);
  if (bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b) return gunzip(bytes, path);
  return bytes;
}

void writeFileBytes(const std::string& path, const std::vector<uint8_t>& bytes, bool gzip) {
  if (gzip) {
    gzFile gz = gzopen(path.c_str(), "wb");
    LOCKSTEP_ENFORCE(gz != nullptr, IoError, path, ": cannot open for writing: ", std::strerror(errno));
    size_t done = 0;
    while (done < bytes.size()) {
      const unsigned chunk = static_cast<unsigned>(std::min<size_t>(bytes.size() - done, 1u << 30));
      const int wrote = gzwrite(gz, bytes.data() + done, chunk);
      if (wrote <= 0) {
        gzclose(gz);
        throw IoError(path + ": gzip write failed");
      }
      done += static_cast<size_t>(wrote);
    }
    LOCKSTEP_ENFORCE(gzclose(gz) == Z_OK, IoError, path, ": gzip close failed");
    return;
  }
  FilePtr f(std::fopen(path.c_str(), "wb"));
  LOCKSTEP_ENFORCE(f != nullptr, IoError, path, ": cannot open for writing: ", std::strerror(errno));
  LOCKSTEP_ENFORCE(bytes.empty() || std::fwrite(bytes.data(), 1, bytes.size(), f.get()) == bytes.size(), IoError,
                   path, ": write failed: ", std::strerror(errno));
  LOCKSTEP_ENFORCE(std::fclose(f.release()) == 0, IoError, path, ": close failed: ", std::strerror(errno));
}

}  // namespace lockstep::data
