#include "lockstep/data/datasets/mnist.h"

#include <array>
#include <filesystem>

#include "lockstep/data/datasets/idx_file.h"

namespace lockstep::data {

std::string findMnistFile(const std::string& dir, const std::string& base) {
  namespace fs = std::filesystem;
  const fs::path gz = fs::path(dir) / (base + ".gz");
  const fs::path raw = fs::path(dir) / base;
  std::error_code ec;
  if (fs::is_regular_file(gz, ec)) return gz.string();
  if (fs::is_regular_file(raw, ec)) return raw.string();
  throw IoError("MNIST file not found: neither " + gz.string() + " nor " + raw.string() +
                " exists; pass the directory holding the IDX files (Debian: "
                "/usr/share/datasets/fashion-mnist after `apt install dataset-fashion-mnist`)");
}

TensorDataset loadMnist(const std::string& dir, Split split, const MnistOptions& options) {
  LOCKSTEP_ENFORCE(options.std > 0, ValueError, "loadMnist: std must be > 0, got ", options.std);
  const std::string prefix = split == Split::train ? "train" : "t10k";
  const std::string images_path = findMnistFile(dir, prefix + "-images-idx3-ubyte");
  const std::string labels_path = findMnistFile(dir, prefix + "-labels-idx1-ubyte");

  IdxArray images = readIdxFile(images_path, kIdxImagesMagic);
  LOCKSTEP_ENFORCE(images.dims[1] == 28 && images.dims[2] == 28, IoError, images_path, ": images are ",
                   images.dims[1], "x", images.dims[2], ", MNIST images must be 28x28");
  IdxArray labels = readIdxFile(labels_path, kIdxLabelsMagic);
  LOCKSTEP_ENFORCE(images.dims[0] == labels.dims[0], IoError, images_path, " holds ", images.dims[0],
                   " images but ", labels_path, " holds ", labels.dims[0],
                   " labels; the two files must come from the same split");

  const int64_t n = images.dims[0];
  Tensor x = Tensor::empty({n, 1, 28, 28}, DType::f32);
  std::array<float, 256> lut;
  for (int v = 0; v < 256; ++v) {
    lut[v] = static_cast<float>((v / 255.0 - options.mean) / options.std);
  }
  float* px = x.data<float>();
  const size_t pixels = images.data.size();
  for (size_t i = 0; i < pixels; ++i) px[i] = lut[images.data[i]];

  Tensor y = Tensor::empty({n}, DType::i64);
  int64_t* py = y.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t label = labels.data[static_cast<size_t>(i)];
    LOCKSTEP_ENFORCE(label <= 9, IoError, labels_path, ": label ", static_cast<int>(label), " of sample ", i,
                     " is outside 0..9 (corrupt file?)");
    py[i] = label;
  }
  return TensorDataset(std::move(x), std::move(y));
}

}  // namespace lockstep::data
