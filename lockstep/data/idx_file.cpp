#include "lockstep/data/idx_file.h"

#include <cstdio>

#include "lockstep/data/file_bytes.h"
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

IdxArray readIdxFile(const std::string& path, uint32_t expected_magic) {
  std::vector<uint8_t> bytes = readMaybeGzipFile(path);
  LOCKSTEP_ENFORCE(bytes.size() >= 4, IoError, path, ": truncated IDX file: ", bytes.size(),
                   " bytes, too short for the 4-byte magic");
  IdxArray a;
  a.magic = readBe32(bytes.data());
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
  LOCKSTEP_ENFORCE(bytes.size() >= header, IoError, path, ": truncated IDX file: ", bytes.size(),
                   " bytes, too short for the ", header, "-byte header of ", ndims, " dims");
  uint64_t expected = 1;
  for (uint32_t d = 0; d < ndims; ++d) {
    const uint32_t size = readBe32(bytes.data() + 4 + 4 * d);
    LOCKSTEP_ENFORCE(size > 0 && size <= (1u << 31), IoError, path, ": bad IDX header: dim ", d, " has size ",
                     size);
    a.dims.push_back(size);
    expected *= size;
    LOCKSTEP_ENFORCE(expected <= (uint64_t{1} << 40), IoError, path,
                     ": bad IDX header: the dims describe more than 2^40 bytes");
  }
  const uint64_t have = bytes.size() - header;
  LOCKSTEP_ENFORCE(have >= expected, IoError, path, ": truncated IDX file: the header promises ", expected,
                   " data bytes but only ", have, " are present");
  LOCKSTEP_ENFORCE(have == expected, IoError, path,
                   ": IDX file length does not match its header: ", have - expected,
                   " trailing bytes after the ", expected, " data bytes");
  a.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return a;
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
