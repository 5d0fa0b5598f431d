#pragma once
// CIFAR-10 in its binary distribution (https://www.cs.toronto.edu/~kriz/cifar.html): files of
// 3073-byte records, 1 label byte (0..9) then 3072 pixel bytes (1024 red, 1024 green, 1024 blue,
// each 32x32 row-major). Train = data_batch_1.bin .. data_batch_5.bin, test = test_batch.bin.
#include <array>
#include <cstdint>
#include <string>

#include "lockstep/data/datasets/split.h"
#include "lockstep/data/datasets/tensor_dataset.h"

namespace lockstep::data {

constexpr int64_t kCifarImageBytes = 3 * 32 * 32;
constexpr int64_t kCifarRecordBytes = 1 + kCifarImageBytes;

struct CifarOptions {
  /// Per-channel (R, G, B) normalisation after scaling to [0, 1]: (x - mean[c]) / std[c].
  /// Defaults are the usual CIFAR-10 training-set statistics.
  std::array<double, 3> mean = {0.4914, 0.4822, 0.4465};
  std::array<double, 3> std = {0.2470, 0.2435, 0.2616};
};

/// The raw content of one binary batch file.
struct CifarRaw {
  Tensor images;  // u8 [N, 3, 32, 32]
  Tensor labels;  // i64 [N]
};

/// Reads one binary batch file. IoError naming the file when it is missing, empty, not a whole
/// number of 3073-byte records (truncated), or holds a label outside 0..9. Reentrant.
CifarRaw readCifarBinary(const std::string& path);
/// Decodes the bytes of one binary batch file (readCifarBinary without the file): IoError naming
/// `path` when empty, not a whole number of records, or holding a label outside 0..9.
CifarRaw decodeCifarBinary(const uint8_t* bytes, size_t size, const std::string& path);

/// Loads the train (5 files, concatenated in order) or test split from `dir` as f32
/// [N, 3, 32, 32] normalised per options, labels i64 [N]. Reentrant.
TensorDataset loadCifar10(const std::string& dir, Split split, const CifarOptions& options = {});

/// Writes images u8 [N, 3, 32, 32] and labels [N] (i64 or u8, values 0..9) as one binary batch
/// file. ValueError for bad shapes/dtypes/labels, IoError when the file cannot be written.
void writeCifarBinary(const std::string& path, const Tensor& images, const Tensor& labels);

struct SyntheticCifarOptions {
  int64_t train_per_file = 100;  // records in each of data_batch_1..5.bin
  int64_t test_samples = 100;    // records in test_batch.bin
  uint64_t seed = 0;
};

/// Writes a small learnable CIFAR-10-format data set into `dir` (which must exist): each class
/// has its own random mean colour per channel and image half, plus per-pixel noise. Deterministic
/// in options.seed. For examples and tests on machines without the real data.
void writeSyntheticCifar10(const std::string& dir, const SyntheticCifarOptions& options = {});

}  // namespace lockstep::data
