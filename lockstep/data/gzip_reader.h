#pragma once
// Streaming gunzip of an in-memory gzip file, read a bounded number of bytes at a time, so a
// reader can decompress a header, learn from it how large the data can be, and never inflate
// more than that (a small "compressed bomb" cannot balloon memory).
#include <zlib.h>

#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::data {

/// deflate cannot compress better than about 1032:1 (zlib's FAQ): a stream of n compressed bytes
/// inflates to at most this many bytes. Lets a reader refuse a header that promises more than its
/// file can hold before inflating anything.
inline uint64_t maxInflatedBytes(uint64_t compressed) { return compressed * 1032 + 1024; }

class GzipReader {
 public:
  /// Borrows data[0, n) (a whole gzip file: one member, or several concatenated, read as one
  /// stream). `path` names the file in messages.
  /// IoError when the file is 4 GiB or more or zlib cannot start.
  GzipReader(const uint8_t* data, size_t n, std::string path);
  ~GzipReader();
  GzipReader(const GzipReader&) = delete;
  GzipReader& operator=(const GzipReader&) = delete;

  /// Appends up to n decompressed bytes to out and returns how many were appended: fewer than n
  /// only when the stream ended. IoError naming the file for a truncated or corrupt stream (bad
  /// data, CRC mismatch, bytes after the end of the stream). Memory grows with what is appended,
  /// not with n.
  size_t read(std::vector<uint8_t>& out, size_t n);
  /// Whether the stream has ended (every byte was read and the CRC checked).
  bool finished() const { return finished_; }

 private:
  z_stream zs_{};
  std::string path_;
  bool finished_ = false;
  uint64_t earlier_members_out_ = 0;  // bytes the members before the current one gave
};

}  // namespace lockstep::data
