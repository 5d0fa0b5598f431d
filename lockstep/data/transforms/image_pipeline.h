#pragma once
#include <memory>
#include <vector>

#include "lockstep/data/transforms/image_to_tensor.h"
#include "lockstep/data/transforms/image_transform.h"

namespace lockstep::data {

/// A decoded image's way to a training input, as torchvision's Compose([..., ToTensor(),
/// Normalize(mean, std)]): the image transforms in order on uint8, then ImageToTensor. Transform i
/// draws from slot i, so a sample's augmentation depends only on (seed, epoch, index): a resumed or
/// re-sharded run, or any number of loader workers, sees the same crops. Thread-safety: immutable.
class ImagePipeline {
 public:
  ImagePipeline(std::vector<std::shared_ptr<const ImageTransform>> transforms, ImageToTensor to_tensor,
                uint64_t seed = 0);
  /// The transformed image, before ToTensor.
  Image augment(Image image, uint64_t epoch, int64_t index) const;
  /// augment, then ImageToTensor: f32 [C, H, W] channels_last.
  Tensor apply(Image image, uint64_t epoch, int64_t index) const;
  /// "RandomResizedCrop(224x224) -> RandomHorizontalFlip -> ToTensor", for messages.
  std::string describe() const;

 private:
  TransformContext context(uint64_t epoch, int64_t index, size_t slot) const;
  std::vector<std::shared_ptr<const ImageTransform>> transforms_;
  ImageToTensor to_tensor_;
  uint64_t seed_;
};

}  // namespace lockstep::data
