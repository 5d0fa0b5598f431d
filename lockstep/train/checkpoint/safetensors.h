#pragma once
// The safetensors format (as Hugging Face's safetensors library and PyTorch users read it):
//   8 bytes little-endian u64 N | N bytes of JSON header | tensor bytes.
// The header maps each name to {"dtype": "F32"|"F64"|"BF16"|"F16"|"I32"|"I64"|"U8", "shape": [...],
// "data_offsets": [begin, end]} (offsets into the bytes after the header), plus an optional
// "__metadata__" object of string -> string.
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lockstep/tensor/tensor.h"
#include "lockstep/util/file.h"

namespace lockstep::train {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

struct SafetensorsFile {
  NamedTensors tensors;  // in file order
  std::map<std::string, std::string> metadata;
  /// The tensor called name; IoError naming the file when absent.
  const Tensor& at(const std::string& name) const;
  std::string path;
};

/// Serialises tensors (any strides; written row-major) and metadata to bytes.
std::string encodeSafetensors(const NamedTensors& tensors,
                              const std::map<std::string, std::string>& metadata = {});
/// What saveSafetensors wrote: its size and CRC-32 (a checkpoint manifest's record).
struct WrittenFile {
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};
/// Writes atomically (temp file, fsync, rename), each tensor's bytes straight from its storage
/// (a non-contiguous one is copied first): no copy of the whole file in memory.
WrittenFile saveSafetensors(const std::string& path, const NamedTensors& tensors,
                            const std::map<std::string, std::string>& metadata = {});
/// saveSafetensors for tensors that are never all in memory at once (a ZeRO stage-3 model saved one
/// gathered bucket at a time): the constructor writes the header from `layout`'s names, shapes and
/// dtypes (their data is not read) into a temp file next to path; write() puts one tensor's values
/// at its place, in any order; commit() checks that every tensor came, fsyncs and renames.
/// Destroyed uncommitted, nothing is left behind. ValueError for an unknown or repeated name or
/// another shape or dtype; IoError naming path for the file.
class SafetensorsStreamWriter {
 public:
  SafetensorsStreamWriter(const std::string& path, const NamedTensors& layout,
                          const std::map<std::string, std::string>& metadata = {});
  void write(const std::string& name, const Tensor& values);
  void commit();

 private:
  struct Entry {
    Shape shape;
    DType dtype;
    uint64_t offset;
    bool written = false;
  };
  std::map<std::string, Entry> entries_;
  size_t written_ = 0;
  file::AtomicFile file_;
};

/// Parses and validates (header length, JSON, dtypes, shapes vs byte ranges, bounds, overlaps);
/// every problem is an IoError naming `path` and what is wrong.
/// One tensor of a header: offsets relative to the data section (after the 8 + N header bytes).
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0, end = 0;
};
struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // in header order
  std::map<std::string, std::string> metadata;
};
/// The header length N from a file's first 8 bytes; IoError naming `path` when the file is too
/// short for it. (For readers that fetch byte ranges: safetensors_reader.h.)
uint64_t safetensorsHeaderLength(std::string_view first8, uint64_t file_size, const std::string& path);
/// Parses and validates a header as decodeSafetensors does (dtypes, shapes vs byte ranges, ranges
/// that tile a data section of data_size bytes); IoError naming `path`.
SafetensorsHeader parseSafetensorsHeader(std::string_view header_json, uint64_t data_size,
                                         const std::string& path);
SafetensorsFile decodeSafetensors(const std::string& bytes, const std::string& path);
SafetensorsFile loadSafetensors(const std::string& path);

}  // namespace lockstep::train
