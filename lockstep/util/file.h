#pragma once
// Whole-file I/O that never leaves a half-written file behind.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep::file {

/// Writes bytes to path atomically: a temp file in the same directory, fsync, rename over path,
/// fsync of the directory. A crash at any point leaves either the old file or the new one.
/// IoError naming the path and the system error on failure (e.g. an unwritable directory).
void writeAtomic(const std::string& path, std::string_view bytes);
/// The same for a file made of pieces written one after the other (no joined copy in memory).
void writeAtomic(const std::string& path, const std::vector<std::string_view>& pieces);
/// The whole file; IoError naming the path when it cannot be read.
std::string readAll(const std::string& path);
bool exists(const std::string& path);
/// mkdir -p; IoError naming the path on failure.
void makeDirs(const std::string& path);
/// CRC-32 (zlib's polynomial), for checksums recorded next to written files. `start`: the CRC-32
/// of the bytes before these (0 for none), so that a file can be checked a piece at a time.
uint32_t crc32(std::string_view bytes, uint32_t start = 0);

}  // namespace lockstep::file
