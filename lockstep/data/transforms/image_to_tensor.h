#pragma once
#include <array>
#include <vector>

#include "lockstep/data/transforms/image.h"
#include "lockstep/tensor/tensor.h"

namespace lockstep::data {

struct ImageToTensorOptions {
  std::vector<double> mean;  // one per channel; empty (with std) = no normalisation
  std::vector<double> std;   // one per channel, all > 0
  DType dtype = DType::f32;  // f32, or bf16 (the f32 value rounded to nearest even)
};

/// The last step of an image pipeline: torchvision's ToTensor() then Normalize(mean, std), in f32 as
/// torchvision computes them ((float(v) / 255 - mean) / std, via a 256-entry table per channel, so
/// the values are torchvision's to the bit), optionally rounded to bf16 (torchvision's
/// .to(torch.bfloat16) after Normalize). Output is channels_last: [C, H, W] with strides
/// (1, W*C, C), i.e. the image's own HWC order, which a batch of them keeps as NHWC.
/// Thread-safety: immutable.
class ImageToTensor {
 public:
  /// ValueError when mean and std differ in length, a std is not > 0, or dtype is not f32 or bf16.
  explicit ImageToTensor(const ImageToTensorOptions& options = {});
  /// A new [C, H, W] channels_last tensor of options.dtype; with `mirror`, of the image mirrored
  /// left-right (a horizontal flip folded into this pass). ValueError when the channel count differs
  /// from mean's.
  Tensor apply(const Image& image, bool mirror = false) const;
  /// Writes H*W*C floats in HWC order to dst (a row of a channels_last batch).
  void writeTo(const Image& image, float* dst, bool mirror = false) const;
  /// The same rounded to bf16.
  void writeTo(const Image& image, BFloat16* dst, bool mirror = false) const;

 private:
  void checkChannels(const Image& image) const;
  std::vector<std::array<float, 256>> table_;          // per channel; one entry when not normalising
  std::vector<std::array<BFloat16, 256>> table_bf16_;  // table_ rounded, when dtype is bf16
  bool normalize_ = false;
  DType dtype_ = DType::f32;
};

}  // namespace lockstep::data
