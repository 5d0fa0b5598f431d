#pragma once
// Transforms of decoded uint8 images (torchvision's, with its parameters and meaning): Resize,
// CenterCrop, RandomResizedCrop, RandomHorizontalFlip, ColorJitter; ImagePipeline chains them and
// ends with ToTensor + Normalize into f32 channels_last. Randomness is counter-based, as for the
// tensor transforms (transform.h): draws depend only on (seed, epoch, index, slot).
#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "lockstep/data/transforms/image.h"
#include "lockstep/data/transforms/transform.h"

namespace lockstep::data {

/// Block `block` of four random words for ctx. Block 0 is transformRandom(ctx); block b > 0 moves
/// Philox's counter to epoch ^ (b << 48), a range no real epoch reaches, so a transform that needs
/// more than four draws (RandomResizedCrop's ten tries) still depends only on (seed, epoch, index, slot).
std::array<uint32_t, 4> imageRandom(const TransformContext& ctx, uint32_t block);

/// One step of an image pipeline: takes an image, returns the transformed one (maybe of another size).
/// Thread-safety: apply() is const and is called concurrently from DataLoader workers.
class ImageTransform {
 public:
  virtual ~ImageTransform() = default;
  /// ValueError when the image does not suit the transform (a message naming the transform).
  virtual Image apply(Image image, const TransformContext& ctx) const = 0;
  /// For messages: "Resize(256)", "CenterCrop(224x224)", ...
  virtual std::string name() const = 0;
  /// A transform that at most mirrors the image left-right (RandomHorizontalFlip) says whether it
  /// mirrors for ctx, so that ImagePipeline::apply can have ToTensor read the pixels in mirrored
  /// order instead of moving them first (the same values, one pass over the image fewer). nullopt
  /// for every other transform.
  virtual std::optional<bool> mirrorsOnly(const TransformContext& ctx) const { return std::nullopt; }
};

}  // namespace lockstep::data
