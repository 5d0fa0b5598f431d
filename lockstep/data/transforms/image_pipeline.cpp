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
  for (size_t i = 0; i < transforms_.size(); ++i) {
    const TransformContext ctx{
        .seed = seed_, .epoch = epoch, .index = index, .slot = static_cast<uint32_t>(i)};
    image = transforms_[i]->apply(std::move(image), ctx);
  }
  return image;
}

Tensor ImagePipeline::apply(Image image, uint64_t epoch, int64_t index) const {
  return to_tensor_.apply(augment(std::move(image), epoch, index));
}

std::string ImagePipeline::describe() const {
  std::string s;
  for (const auto& t : transforms_) s += t->name() + " -> ";
  return s + "ToTensor";
}

}  // namespace lockstep::data
