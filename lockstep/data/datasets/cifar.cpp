#include "lockstep/data/datasets/cifar.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "lockstep/data/file_bytes.h"
#include "lockstep/tensor/generator.h"

namespace lockstep::data {

CifarRaw readCifarBinary(const std::string& path) {
  std::error_code ec;
  LOCKSTEP_ENFORCE(std::filesystem::is_regular_file(path, ec), IoError, path,
                   ": CIFAR-10 batch file not found (expected data_batch_1..5.bin and test_batch.bin from "
                   "cifar-10-binary.tar.gz, or run writeSyntheticCifar10)");
  const std::vector<uint8_t> bytes = readFileBytes(path);
  return decodeCifarBinary(bytes.data(), bytes.size(), path);
}

CifarRaw decodeCifarBinary(const uint8_t* bytes, size_t size, const std::string& path) {
  LOCKSTEP_ENFORCE(size != 0, IoError, path, ": empty CIFAR-10 batch file");
  LOCKSTEP_ENFORCE(size % kCifarRecordBytes == 0, IoError, path,
                   ": truncated or corrupt CIFAR-10 file: ", size, " bytes is not a multiple of the ",
                   kCifarRecordBytes, "-byte record (", size / kCifarRecordBytes, " whole records and ",
                   size % kCifarRecordBytes, " stray bytes)");
  // n * kCifarRecordBytes == size: every offset below stays inside the buffer.
  const int64_t n = static_cast<int64_t>(size / kCifarRecordBytes);
  CifarRaw raw{Tensor::empty({n, 3, 32, 32}, DType::u8), Tensor::empty({n}, DType::i64)};
  uint8_t* img = raw.images.data<uint8_t>();
  int64_t* lab = raw.labels.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* rec = bytes + i * kCifarRecordBytes;
    LOCKSTEP_ENFORCE(rec[0] <= 9, IoError, path, ": record ", i, " has label ", static_cast<int>(rec[0]),
                     ", outside 0..9 (corrupt file, or not CIFAR-10?)");
    lab[i] = rec[0];
    std::memcpy(img + i * kCifarImageBytes, rec + 1, kCifarImageBytes);
  }
  return raw;
}

TensorDataset loadCifar10(const std::string& dir, Split split, const CifarOptions& options) {
  for (double s : options.std) LOCKSTEP_ENFORCE(s > 0, ValueError, "loadCifar10: std must be > 0, got ", s);
  std::vector<std::string> files;
  if (split == Split::train) {
    for (int i = 1; i <= 5; ++i) files.push_back("data_batch_" + std::to_string(i) + ".bin");
  } else {
    files.push_back("test_batch.bin");
  }
  std::vector<CifarRaw> parts;
  int64_t n = 0;
  for (const auto& f : files) {
    parts.push_back(readCifarBinary((std::filesystem::path(dir) / f).string()));
    n += parts.back().labels.size(0);
  }
  Tensor x = Tensor::empty({n, 3, 32, 32}, DType::f32);
  Tensor y = Tensor::empty({n}, DType::i64);
  std::array<std::array<float, 256>, 3> lut;
  for (int c = 0; c < 3; ++c) {
    for (int v = 0; v < 256; ++v)
      lut[c][v] = static_cast<float>((v / 255.0 - options.mean[c]) / options.std[c]);
  }
  float* px = x.data<float>();
  int64_t* py = y.data<int64_t>();
  for (const auto& part : parts) {
    const int64_t m = part.labels.size(0);
    const uint8_t* src = part.images.data<uint8_t>();
    for (int64_t i = 0; i < m * kCifarImageBytes; ++i) px[i] = lut[(i / 1024) % 3][src[i]];
    std::memcpy(py, part.labels.data<int64_t>(), static_cast<size_t>(m) * sizeof(int64_t));
    px += m * kCifarImageBytes;
    py += m;
  }
  return TensorDataset(std::move(x), std::move(y));
}

void writeCifarBinary(const std::string& path, const Tensor& images, const Tensor& labels) {
  LOCKSTEP_ENFORCE(images.dtype() == DType::u8 && images.shape() == Shape({images.size(0), 3, 32, 32}),
                   ValueError, "writeCifarBinary(", path, "): images must be u8 [N, 3, 32, 32], got ",
                   images.describe());
  LOCKSTEP_ENFORCE(labels.dim() == 1 && labels.size(0) == images.size(0), ValueError, "writeCifarBinary(",
                   path, "): labels must be [", images.size(0), "], got ", labels.describe());
  const int64_t n = images.size(0);
  Tensor img = images.contiguous();
  std::vector<int64_t> lab = labels.toVector<int64_t>();
  std::vector<uint8_t> out(static_cast<size_t>(n * kCifarRecordBytes));
  for (int64_t i = 0; i < n; ++i) {
    LOCKSTEP_ENFORCE(lab[i] >= 0 && lab[i] <= 9, ValueError, "writeCifarBinary(", path, "): label ", lab[i],
                     " of sample ", i, " is outside 0..9");
    out[i * kCifarRecordBytes] = static_cast<uint8_t>(lab[i]);
    std::memcpy(out.data() + i * kCifarRecordBytes + 1, img.data<uint8_t>() + i * kCifarImageBytes,
                kCifarImageBytes);
  }
  writeFileBytes(path, out, false);
}

namespace {
void writeSyntheticFile(const std::string& path, int64_t n, const std::vector<double>& class_means,
                        Generator& gen) {
  Tensor noise = Tensor::empty({n, 3, 32, 32}, DType::f32);
  gen.normal(noise, 0.0, 0.15);
  Tensor images = Tensor::empty({n, 3, 32, 32}, DType::u8);
  Tensor labels = Tensor::empty({n}, DType::i64);
  const float* pn = noise.data<float>();
  uint8_t* pi = images.data<uint8_t>();
  int64_t* pl = labels.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = static_cast<int64_t>(gen.nextBelow(10));
    pl[i] = c;
    for (int64_t j = 0; j < kCifarImageBytes; ++j) {
      const int64_t ch = j / 1024, half = (j % 1024) / 512;  // top / bottom half of the image
      const double v = class_means[static_cast<size_t>(c * 6 + ch * 2 + half)] + pn[i * kCifarImageBytes + j];
      pi[i * kCifarImageBytes + j] = static_cast<uint8_t>(std::clamp(v, 0.0, 1.0) * 255.0 + 0.5);
    }
  }
  writeCifarBinary(path, images, labels);
}
}  // namespace

void writeSyntheticCifar10(const std::string& dir, const SyntheticCifarOptions& options) {
  LOCKSTEP_ENFORCE(options.train_per_file > 0 && options.test_samples > 0, ValueError,
                   "writeSyntheticCifar10: sample counts must be positive");
  Generator gen(options.seed);
  std::vector<double> class_means(10 * 6);
  for (double& m : class_means) m = 0.2 + 0.6 * gen.nextDouble();
  const std::filesystem::path d(dir);
  for (int i = 1; i <= 5; ++i) {
    writeSyntheticFile((d / ("data_batch_" + std::to_string(i) + ".bin")).string(), options.train_per_file,
                       class_means, gen);
  }
  writeSyntheticFile((d / "test_batch.bin").string(), options.test_samples, class_means, gen);
}

}  // namespace lockstep::data
