#pragma once
// A safetensors file read by byte ranges (pread) instead of whole: only the header is read when it
// is opened, then any tensor or run of a tensor's elements on demand. What a partitioned ZeRO
// checkpoint's loader needs (zero_checkpoint.h): each rank reads the elements it owns, not the
// whole model's optimizer state. The header is validated as decodeSafetensors validates it.
// Not thread-safe (one reader per thread); the file is held open until destruction.
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "lockstep/train/checkpoint/safetensors.h"

namespace lockstep::train {

class SafetensorsReader {
 public:
  /// Opens path and reads its header. IoError naming the file when it is missing, unreadable or
  /// not a valid safetensors file (truncated data included: the header's ranges must fit).
  explicit SafetensorsReader(const std::string& path);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;
  SafetensorsReader(SafetensorsReader&& other) noexcept;
  SafetensorsReader& operator=(SafetensorsReader&&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  bool contains(const std::string& name) const { return index_.count(name) > 0; }
  /// Every tensor's entry, in header order.
  const std::vector<SafetensorsEntry>& entries() const { return header_.entries; }
  /// The tensor's entry; IoError naming the file and the tensor when absent.
  const SafetensorsEntry& entry(const std::string& name) const;
  /// Elements [first, first + count) of the tensor (flat, row-major) into dst, which must hold
  /// count elements of its dtype. IoError on a short read; ValueError when out of range.
  void readElements(const std::string& name, int64_t first, int64_t count, void* dst) const;
  /// The whole tensor.
  Tensor read(const std::string& name) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t data_start_ = 0;  // 8 + header length
  SafetensorsHeader header_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace lockstep::train
