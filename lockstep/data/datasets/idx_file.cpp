#include "lockstep/data/datasets/idx_file.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "lockstep/data/file_bytes.h"
#include "lockstep/data/gzip_reader.h"
#include "lockstep/util/error.h"

namespace lockstep::data {

namespace {
uint32_t readBe32(const uint8_t* p) {
  return (static_cast<uint32_t>(p[0]) << 24) | (static_cast<uint32_t>(p[1]) << 16) |
         (static_cast<uint32_t>(p[2]) << 8) | static_cast<uint32_t>(p[3]);
}
void appendBe32(std::vector<uint8_t>& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(v >> s));
}
std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}
}  // namespace

IdxArray decodeIdx(const uint8_t* bytes, size_t n, const std::string& path, uint32_t expected_magic) {
  // The bytes come from the file as-is or through a bounded gunzip: take(k) appends up to k more
  // and returns how many there were, so a header is read before the data it sizes.
  std::optional<GzipReader> gz;
  if (isGzip(bytes, n)) gz.emplace(bytes, n, path);
  size_t raw_pos = 0;
  std::vector<uint8_t> buf;
  auto take = [&](size_t k) -> size_t {
    if (gz) return gz->read(buf, k);
    const size_t got = std::min(k, n - raw_pos);
    buf.insert(buf.end(), bytes + raw_pos, bytes + raw_pos + got);
    raw_pos += got;
    return got;
  };
  take(4);
  LOCKSTEP_ENFORCE(buf.size() >= 4, IoError, path, ": truncated IDX file: ", buf.size(),
                   " bytes, too short for the 4-byte magic");
  IdxArray a;
  a.magic = readBe32(buf.data());
  if (expected_magic != 0) {
    LOCKSTEP_ENFORCE(a.magic == expected_magic, IoError, path, ": bad IDX magic ", hex(a.magic),
                     ", expected ", hex(expected_magic), " (is this the right file, or is it corrupt?)");
  }
  const uint32_t type = (a.magic >> 8) & 0xff;
  const uint32_t ndims = a.magic & 0xff;
  LOCKSTEP_ENFORCE((a.magic >> 16) == 0 && type == 0x08 && ndims >= 1 && ndims <= 8, IoError, path,
                   ": bad IDX magic ", hex(a.magic),
                   " (only unsigned-byte IDX files with 1..8 dims are read)");
  const size_t header = 4 + 4 * static_cast<size_t>(ndims);
  take(header - 4);
  LOCKSTEP_ENFORCE(buf.size() >= header, IoError, path, ": truncated IDX file: ", buf.size(),
                   " bytes, too short for the ", header, "-byte header of ", ndims, " dims");
  uint64_t expected = 1;
  for (uint32_t d = 0; d < ndims; ++d) {
    const uint32_t size = readBe32(buf.data() + 4 + 4 * d);
    LOCKSTEP_ENFORCE(size > 0 && size <= (1u << 31), IoError, path, ": bad IDX header: dim ", d, " has size ",
                     size);
    a.dims.push_back(size);
    expected *= size;  // < 2^40 * 2^31: no overflow
    LOCKSTEP_ENFORCE(expected <= (uint64_t{1} << 40), IoError, path,
                     ": bad IDX header: the dims describe more than 2^40 bytes");
  }
  // A gzip file cannot hold more than deflate's best ratio allows: refuse before inflating.
  LOCKSTEP_ENFORCE(!gz || expected <= maxInflatedBytes(n), IoError, path,
                   ": truncated IDX file: the header promises ", expected, " data bytes but a gzip file of ",
                   n, " bytes inflates to at most ", maxInflatedBytes(n));
  buf.clear();
  const uint64_t have = take(static_cast<size_t>(expected));
  LOCKSTEP_ENFORCE(have >= expected, IoError, path, ": truncated IDX file: the header promises ", expected,
                   " data bytes but only ", have, " are present");
  a.data = std::move(buf);
  buf.clear();
  // Trailing bytes: the raw rest, or what the stream yields beyond the data, inflated no further
  // than 64 KiB (enough to count a few stray bytes, too little for a bomb to matter).
  constexpr size_t kLook = 64 << 10;
  uint64_t trailing = n - raw_pos;
  if (gz) trailing = gz->read(buf, kLook);
  LOCKSTEP_ENFORCE(trailing == 0, IoError, path,
                   ": IDX file length does not match its header: ", trailing == kLook ? "at least " : "",
                   trailing, " trailing bytes after the ", expected, " data bytes");
  return a;
}

IdxArray readIdxFile(const std::string& path, uint32_t expected_magic) {
  const std::vector<uint8_t> bytes = readFileBytes(path);
  return decodeIdx(bytes.data(), bytes.size(), path, expected_magic);
}

void writeIdxFile(const std::string& path, const std::vector<int64_t>& dims, const std::vector<uint8_t>& data,
                  bool gzip) {
  LOCKSTEP_ENFORCE(!dims.empty() && dims.size() <= 8, ValueError, "writeIdxFile(", path,
                   "): need 1..8 dims, got ", dims.size());
  uint64_t n = 1;
  for (int64_t d : dims) {
    LOCKSTEP_ENFORCE(d > 0, ValueError, "writeIdxFile(", path, "): dims must be positive");
    n *= static_cast<uint64_t>(d);
  }
  LOCKSTEP_ENFORCE(n == data.size(), ValueError, "writeIdxFile(", path, "): dims hold ", n, " bytes but ",
                   data.size(), " were given");
  std::vector<uint8_t> out;
  out.reserve(4 + 4 * dims.size() + data.size());
  appendBe32(out, 0x00000800u | static_cast<uint32_t>(dims.size()));
  for (int64_t d : dims) appendBe32(out, static_cast<uint32_t>(d));
  out.insert(out.end(), data.begin(), data.end());
  writeFileBytes(path, out, gzip);
}

}  // namespace lockstep::data
