#include "lockstep/data/transforms/image_pipeline.h"

#include "lockstep/util/error.h"

namespace lockstep::data {

ImagePipeline::ImagePipeline(std::vector<std::shared_ptr<const ImageTransform>> transforms,
                             ImageToTensor to_tensor, uint64_t seed)
    : transforms_(std::move(transforms)), to_tensor_(std::move(to_tensor)), seed_(seed) {
  for (size_t i = 0; i < transforms_.size(); ++i)
    LOCKSTEP_ENFORCE(transforms_[i] != nullptr, ValueError, "ImagePipeline: transform ", i, " is null");
}

Image ImagePipeline::augment(Image image, uint64_t epoch, int64_t index) const {
  for (size_t i = 0; i < transforms_.size(); ++i)
    image = transforms_[i]->apply(std::move(image), context(epoch, index, i));
  return image;
}

Tensor ImagePipeline::apply(Image image, uint64_t epoch, int64_t index) const {
  // Trailing flips (RandomHorizontalFlip last, as in torchvision's recipe) become the order in which
  // ToTensor reads the pixels.
  size_t end = transforms_.size();
  bool mirror = false;
  for (; end > 0; --end) {
    const std::optional<bool> m = transforms_[end - 1]->mirrorsOnly(context(epoch, index, end - 1));
    if (!m) break;
    mirror = mirror != *m;
  }
  for (size_t i = 0; i < end; ++i) image = transforms_[i]->apply(std::move(image), context(epoch, index, i));
  return to_tensor_.apply(image, mirror);
}

TransformContext ImagePipeline::context(uint64_t epoch, int64_t index, size_t slot) const {
  return {.seed = seed_, .epoch = epoch, .index = index, .slot = static_cast<uint32_t>(slot)};
}

std::string ImagePipeline::describe() const {
  std::string s;
  for (const auto& t : transforms_) s += t->name() + " -> ";
  return s + "ToTensor";
}

}  // namespace lockstep::data
