#include "lockstep/data/gzip_reader.h"

#include <algorithm>
#include <limits>

#include "lockstep/util/error.h"

namespace lockstep::data {

GzipReader::GzipReader(const uint8_t* data, size_t n, std::string path) : path_(std::move(path)) {
  LOCKSTEP_ENFORCE(n < std::numeric_limits<uInt>::max(), IoError, path_,
                   ": compressed files of 4 GiB or more are not supported");
  // 15 + 16: gzip wrapper only (the caller checked the magic).
  LOCKSTEP_ENFORCE(inflateInit2(&zs_, 15 + 16) == Z_OK, IoError, path_, ": cannot initialise zlib");
  zs_.next_in = const_cast<Bytef*>(data);
  zs_.avail_in = static_cast<uInt>(n);
}

GzipReader::~GzipReader() { inflateEnd(&zs_); }

size_t GzipReader::read(std::vector<uint8_t>& out, size_t n) {
  const size_t start = out.size();
  size_t produced = 0;
  while (produced < n && !finished_) {
    // Grow geometrically from 64 KiB: the buffer follows the data produced, not the request (a
    // header may promise far more than the stream holds).
    const size_t chunk =
        std::min<size_t>({n - produced, std::max<size_t>(size_t{64} << 10, produced), size_t{1} << 30});
    out.resize(start + produced + chunk);
    zs_.next_out = out.data() + start + produced;
    zs_.avail_out = static_cast<uInt>(chunk);
    const int rc = inflate(&zs_, Z_NO_FLUSH);
    produced += chunk - zs_.avail_out;
    if (rc == Z_STREAM_END) {
      // Another member (gzip files may be concatenated, as Python's gzip and zcat read them): on.
      if (zs_.avail_in >= 2 && zs_.next_in[0] == 0x1f && zs_.next_in[1] == 0x8b) {
        earlier_members_out_ += zs_.total_out;  // inflateReset zeroes it
        LOCKSTEP_ENFORCE(inflateReset(&zs_) == Z_OK, IoError, path_, ": cannot reset zlib");
        continue;
      }
      finished_ = true;
      LOCKSTEP_ENFORCE(zs_.avail_in == 0, IoError, path_, ": corrupt gzip file: ", zs_.avail_in,
                       " unexpected bytes after the end of the compressed stream");
      break;
    }
    if (rc == Z_OK) continue;
    out.resize(start + produced);
    if (rc == Z_BUF_ERROR && zs_.avail_in == 0) {
      throw IoError(path_ + ": truncated gzip file: the compressed stream ends early after " +
                    std::to_string(earlier_members_out_ + zs_.total_out) +
                    " decompressed bytes; re-download or re-generate the file");
    }
    const std::string msg = zs_.msg ? zs_.msg : "zlib error " + std::to_string(rc);
    throw IoError(path_ + ": corrupt gzip file (" + msg + "); re-download or re-generate the file");
  }
  out.resize(start + produced);
  return produced;
}

}  // namespace lockstep::data
