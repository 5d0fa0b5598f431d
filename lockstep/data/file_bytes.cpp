#include "lockstep/data/file_bytes.h"

#include <zlib.h>

#include <algorithm>
#include <limits>
#include <string_view>

#include "lockstep/data/gzip_reader.h"
#include "lockstep/util/error.h"
#include "lockstep/util/file.h"

namespace lockstep::data {

std::vector<uint8_t> readFileBytes(const std::string& path) {
  const std::string bytes = file::readAll(path);
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

bool isGzip(const uint8_t* data, size_t n) { return n >= 2 && data[0] == 0x1f && data[1] == 0x8b; }

std::vector<uint8_t> readMaybeGzipFile(const std::string& path, size_t max_bytes) {
  std::vector<uint8_t> bytes = readFileBytes(path);
  if (!isGzip(bytes.data(), bytes.size())) return bytes;
  GzipReader gz(bytes.data(), bytes.size(), path);
  std::vector<uint8_t> out;
  gz.read(out, max_bytes);
  std::vector<uint8_t> one;
  LOCKSTEP_ENFORCE(gz.finished() || gz.read(one, 1) == 0, IoError, path, ": gzip file inflates to more than ",
                   max_bytes, " bytes, the most this reader accepts (corrupt file or a compressed bomb?)");
  return out;
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
