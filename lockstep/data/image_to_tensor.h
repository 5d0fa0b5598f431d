#pragma once
#include <array>
#include <vector>

#include "lockstep/data/image.h"
#include "lockstep/tensor/tensor.h"

namespace lockstep::data {

struct ImageToTensorOptions {
  std::vector<double> mean;  // one per channel; empty (with std) = no normalisation
  std::vector<double> std;   // one per channel, all > 0
};

/// The last step of an image pipeline: torchvision's ToTensor() then Normalize(mean, std), in f32 as
/// torchvision computes them ((float(v) / 255 - mean) / std, via a 256-entry table per channel, so
/// the values are torchvision's to the bit). Output is channels_last: [C, H, W] with strides
/// (1, W*C, C), i.e. the image's own HWC order, which a batch of them keeps as NHWC.
/// Thread-safety: immutable.
class ImageToTensor {
 public:
  /// ValueError when mean and std differ in length or a std is not > 0.
  explicit ImageToTensor(const ImageToTensorOptions& options = {});
  /// A new f32 [C, H, W] channels_last tensor. ValueError when the channel count differs from mean's.
  Tensor apply(const Image& image) const;
  /// Writes H*W*C floats in HWC order to dst (a row of a channels_last batch).
  void writeTo(const Image& image, float* dst) const;

 private:
  void checkChannels(const Image& image) const;
  std::vector<std::array<float, 256>> table_;  // per channel; one entry when not normalising
  bool normalize_ = false;
};

}  // namespace lockstep::data
