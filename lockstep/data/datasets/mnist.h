#pragma once
// MNIST / Fashion-MNIST from the four IDX files of the original distribution.
#include <memory>
#include <string>

#include "lockstep/data/datasets/split.h"
#include "lockstep/data/datasets/tensor_dataset.h"

namespace lockstep::data {

struct MnistOptions {
  /// Pixels are scaled to [0, 1] and then normalised as (x - mean) / std. The defaults are MNIST's
  /// (the PyTorch MNIST example); for Fashion-MNIST pass mean 0.2860, std 0.3530. std must be > 0.
  double mean = 0.1307;
  double std = 0.3081;
};

/// Loads `dir`/{train,t10k}-{images-idx3,labels-idx1}-ubyte, each either gzipped (".gz" suffix,
/// preferred when both exist) or raw. Images become f32 [N, 1, 28, 28], labels i64 [N] in 0..9.
/// IoError naming the file and the problem when a file is missing, truncated, corrupt, has the
/// wrong magic or image size, when labels are out of 0..9, or when images and labels differ in
/// count. Thread-safety: reentrant.
TensorDataset loadMnist(const std::string& dir, Split split, const MnistOptions& options = {});

/// Path of an MNIST file in dir: "<dir>/<base>.gz" if that exists, else "<dir>/<base>" if that
/// exists; IoError naming both candidates otherwise.
std::string findMnistFile(const std::string& dir, const std::string& base);

}  // namespace lockstep::data
