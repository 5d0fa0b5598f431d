#pragma once
// Whole-file reads and writes with optional gzip, for the dataset readers.
#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::data {

/// The bytes of `path`; IoError naming the file when it cannot be opened or read.
std::vector<uint8_t> readFileBytes(const std::string& path);
/// Whether bytes start with the gzip magic (1f 8b).
bool isGzip(const uint8_t* data, size_t n);
/// The bytes of `path`, gunzipped when they start with the gzip magic, as-is otherwise.
/// IoError naming the file for a truncated or corrupt gzip stream (bad data, CRC mismatch) and
/// for one that inflates to more than max_bytes (never inflated further than that).
std::vector<uint8_t> readMaybeGzipFile(const std::string& path, size_t max_bytes);
/// Writes `bytes` to `path` atomically (file::writeAtomic: readers never see half a file),
/// gzip-compressed when `gzip`. IoError naming the file on failure. At most 4 GiB.
void writeFileBytes(const std::string& path, const std::vector<uint8_t>& bytes, bool gzip = false);

}  // namespace lockstep::data
