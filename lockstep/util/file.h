#pragma once
// Whole-file I/O that never leaves a half-written file behind.
#include <cstdint>
#include <cstdio>
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
/// A file written a piece at a time with writeAtomic's guarantees: append() and writeAt() (at a
/// byte offset, as pwrite) write into a temp file next to path; commit() fsyncs it, renames it over path and
/// fsyncs the directory. Destroyed without commit() (an error on the way), the temp file is removed and path
/// is untouched. IoError naming path on any failure. Not thread-safe.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  void append(std::string_view bytes);
  void writeAt(uint64_t offset, std::string_view bytes);
  void commit();

 private:
  std::string path_, dir_, tmp_;
  int fd_ = -1;
  uint64_t append_at_ = 0;  // where the next append() writes
};

/// A line-oriented file (a CSV log) opened to append to (created when missing). One that ends
/// without a newline was cut short mid-line (a full disk, a kill): that unfinished line is cut off
/// first, so the rows appended start on a line of their own. The caller fcloses `file`. IoError
/// naming the path on failure.
struct AppendedLines {
  std::FILE* file = nullptr;
  bool fresh = false;   // empty (or new): the caller writes its header
  int64_t dropped = 0;  // bytes of an unfinished last line cut off
};
AppendedLines openLinesForAppend(const std::string& path);

/// The whole file; IoError naming the path when it cannot be read.
std::string readAll(const std::string& path);
/// Makes the renames in dir durable (fsync of the directory). IoError naming dir when the sync
/// fails (EIO); a filesystem that cannot sync directories at all (EINVAL), or a directory this
/// process may write but not read, is left unsynced.
void syncDirectory(const std::string& dir);
/// Whether something is at path (a symlink: its target). IoError naming the path when that cannot
/// be told (a symlink loop, a parent without search permission): not the filesystem_error that
/// std::filesystem::exists throws.
bool exists(const std::string& path);
/// Whether path is a directory (a symlink: its target's kind); IoError as exists().
bool isDirectory(const std::string& path);
/// mkdir -p; IoError naming the path on failure.
void makeDirs(const std::string& path);
/// CRC-32 (zlib's polynomial), for checksums recorded next to written files. `start`: the CRC-32
/// of the bytes before these (0 for none), so that a file can be checked a piece at a time.
uint32_t crc32(std::string_view bytes, uint32_t start = 0);

}  // namespace lockstep::file
