#include "lockstep/data/file_bytes.h"

#include <zlib.h>

#include <algorithm>
#include <limits>
#include <string_view>

#include "lockstep/util/error.h"
#include "lockstep/util/file.h"

namespace lockstep::data {

namespace {
std::vector<uint8_t> gunzip(const std::vector<uint8_t>& in, const std::string& path) {
  LOCKSTEP_ENFORCE(in.size() < std::numeric_limits<uInt>::max(), IoError, path,
                   ": compressed files of 4 GiB or more are not supported");
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
  const std::string bytes = file::readAll(path);
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

std::vector<uint8_t> readMaybeGzipFile(const std::string& path) {
  std::vector<uint8_t> bytes = readFileBytes(path);
  if (bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b) return gunzip(bytes, path);
  return bytes;
}

void writeFileBytes(const std::string& path, const std::vector<uint8_t>& bytes, bool gzip) {
  if (!gzip) {
    file::writeAtomic(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
    return;
  }
  LOCKSTEP_ENFORCE(bytes.size() < std::numeric_limits<uInt>::max() / 2, IoError, path,
                   ": gzip writes of 2 GiB or more are not supported");
  z_stream zs{};
  // 15 + 16: a gzip wrapper, as `gzip` writes it.
  LOCKSTEP_ENFORCE(
      deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK, IoError,
      path, ": cannot initialise zlib");
  std::string out(deflateBound(&zs, static_cast<uLong>(bytes.size())), '\0');
  zs.next_in = const_cast<Bytef*>(bytes.data());
  zs.avail_in = static_cast<uInt>(bytes.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  LOCKSTEP_ENFORCE(rc == Z_STREAM_END, IoError, path, ": gzip compression failed (zlib error ", rc, ")");
  file::writeAtomic(path, out);
}

}  // namespace lockstep::data
