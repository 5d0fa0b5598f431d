#pragma once
// CIFAR-10 (https://www.cs.toronto.edu/~kriz/cifar.html) in either of its distributions:
//  - binary (cifar-10-binary.tar.gz): files of 3073-byte records, 1 label byte (0..9) then 3072
//    pixel bytes (1024 red, 1024 green, 1024 blue, each 32x32 row-major). Train =
//    data_batch_1.bin .. data_batch_5.bin, test = test_batch.bin.
//  - python (cifar-10-python.tar.gz, what torchvision and Paddle download): data_batch_1 ..
//    data_batch_5 and test_batch, each a pickled dict whose 'data' is a uint8 numpy array
//    [N, 3072] of the same pixel layout and whose 'labels' are N ints 0..9.
// Either is read from its folder (cifar-10-batches-bin/, cifar-10-batches-py/), from a folder
// holding that folder (torchvision's `root`) or the downloaded .tar.gz, or from the .tar.gz itself
// (Paddle's `data_file`).
#include <array>
#include <cstdint>
#include <string>
#include <vector>

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

/// Decodes one batch of the python version (data_batch_N, test_batch): IoError naming `path` when
/// it is not a pickled dict with a uint8 'data' array [N, 3072] (or [N, 3, 32, 32]) and N
/// 'labels' in 0..9 (a CIFAR-100 batch, with 'fine_labels', is named as such). The pickle is read
/// as data only (data/pickle_reader.h): nothing in the file is run.
CifarRaw decodeCifarPython(const uint8_t* bytes, size_t size, const std::string& path);

/// Where CIFAR-10's batches are.
struct CifarSource {
  enum class Kind { binary_dir, python_dir, archive };
  Kind kind = Kind::binary_dir;
  std::string path;  // the folder holding the batches, or the archive
};
/// Finds CIFAR-10 at `root`: a folder holding the batches of either version, a folder holding
/// cifar-10-batches-bin/ or cifar-10-batches-py/ (torchvision's root) or cifar-10-binary.tar.gz /
/// cifar-10-python.tar.gz, or such a .tar.gz itself. IoError naming `root` and what was looked for
/// otherwise. Reads no batch.
CifarSource findCifar10(const std::string& root);
/// The batches of one split from `source`, in order (train: data_batch_1 .. 5; test: test_batch).
/// IoError naming the file (or the archive and its member) that is missing or damaged.
std::vector<CifarRaw> readCifar10Split(const CifarSource& source, Split split);

/// Loads the train (5 files, concatenated in order) or test split from `root` (findCifar10) as f32
/// [N, 3, 32, 32] normalised per options, labels i64 [N]. Reentrant.
TensorDataset loadCifar10(const std::string& root, Split split, const CifarOptions& options = {});

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
