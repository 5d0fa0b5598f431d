#pragma once
// The IDX format of MNIST and Fashion-MNIST (http://yann.lecun.com/exdb/mnist/): a big-endian
// magic 0x0000TTDD (TT = 0x08 for unsigned bytes, DD = number of dims), DD big-endian u32 sizes,
// then the elements. Files may be gzipped.
#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::data {

constexpr uint32_t kIdxImagesMagic = 0x00000803;  // u8, 3 dims: [N, rows, cols]
constexpr uint32_t kIdxLabelsMagic = 0x00000801;  // u8, 1 dim: [N]

/// A decoded IDX file of unsigned bytes.
struct IdxArray {
  uint32_t magic = 0;
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;  // row-major, product(dims) bytes
};

/// Decodes the bytes of an IDX file (gzip or raw). When expected_magic is non-zero the magic must
/// equal it. IoError naming `path` and the problem for: a bad magic, a zero size, a file shorter or
/// longer than its header says (truncated / trailing bytes), a corrupt gzip stream. A gzip stream
/// is inflated no further than the header says the data is (plus one byte to see trailing data),
/// and a header promising more than the file can hold is refused before any data is inflated.
IdxArray decodeIdx(const uint8_t* bytes, size_t n, const std::string& path, uint32_t expected_magic = 0);
/// Reads and decodes an IDX file (decodeIdx); IoError naming the file when it cannot be read.
IdxArray readIdxFile(const std::string& path, uint32_t expected_magic = 0);

/// Writes an u8 IDX file (gzip when `gzip`), for tests and synthetic data. ValueError when data
/// does not hold product(dims) bytes.
void writeIdxFile(const std::string& path, const std::vector<int64_t>& dims, const std::vector<uint8_t>& data,
                  bool gzip);

}  // namespace lockstep::data
