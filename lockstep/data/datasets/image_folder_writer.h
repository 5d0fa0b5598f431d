#pragma once
// A small ImageNet-shaped image folder (train/CLASS/*.JPEG, val/CLASS/*.JPEG) of real JPEG files
// made from a data set already on the machine (Fashion-MNIST or CIFAR-10 binaries), upscaled to
// varied sizes and aspect ratios and re-encoded: data for tests and benchmarks of image_folder
// without a download. Behind `lockstep data make-image-folder`.
#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::data {

struct ImageFolderWriterOptions {
  std::string source = "fashion_mnist";  // fashion_mnist or cifar10
  /// The source's files; empty: Debian's Fashion-MNIST (/usr/share/datasets/fashion-mnist). CIFAR-10
  /// must be given.
  std::string source_root;
  int64_t classes = 10;          // the first `classes` of the source's 10
  int64_t train_per_class = 20;  // from the source's training split
  int64_t val_per_class = 5;     // from its test split
  /// Each image's shorter side is uniform in [min_side, max_side] and its aspect ratio log-uniform
  /// in [3/4, 4/3] (ImageNet's photos are mostly 4:3 or 3:4 at a few hundred pixels).
  int64_t min_side = 160, max_side = 320;
  int quality = 90;  // JPEG quality
  uint64_t seed = 0;
};

struct ImageFolderWriterResult {
  std::vector<std::string> classes;  // the class folders' names, sorted
  int64_t train_files = 0, val_files = 0;
};

/// Writes `dir`/train and `dir`/val. ValueError for options out of range or an unknown source;
/// IoError when dir exists and is not empty, when the source files are missing (naming them) or
/// hold fewer images of a class than asked for. The same options always give the same files.
ImageFolderWriterResult writeImageFolder(const std::string& dir,
                                         const ImageFolderWriterOptions& options = {});

}  // namespace lockstep::data
