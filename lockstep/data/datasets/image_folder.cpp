#include "lockstep/data/datasets/image_folder.h"

#include <cstdio>

#include "lockstep/data/image_codecs/image_file.h"
#include "lockstep/util/error.h"

namespace lockstep::data {

ImageFolder::ImageFolder(ImageFileList list, std::shared_ptr<const ImagePipeline> pipeline,
                         const ImageFolderOptions& options)
    : ImageFolder(std::make_shared<const ImageFileList>(std::move(list)), std::move(pipeline), options) {}

ImageFolder::ImageFolder(std::shared_ptr<const ImageFileList> list,
                         std::shared_ptr<const ImagePipeline> pipeline, const ImageFolderOptions& options)
    : list_(std::move(list)), pipeline_(std::move(pipeline)), options_(options) {
  LOCKSTEP_ENFORCE(list_ != nullptr, ValueError, "ImageFolder: the file list is null");
  LOCKSTEP_ENFORCE(pipeline_ != nullptr, ValueError, "ImageFolder: the image pipeline is null");
  LOCKSTEP_ENFORCE(list_->paths.size() == list_->labels.size(), ValueError,
                   "ImageFolder: ", list_->paths.size(), " paths but ", list_->labels.size(), " labels");
}

LabeledImage ImageFolder::loadImage(int64_t index) const {
  checkIndex(index, "ImageFolder");
  const int64_t n = size();
  for (int64_t tries = 0; tries < n; ++tries) {
    const int64_t i = (index + tries) % n;
    const auto u = static_cast<size_t>(i);
    if (options_.skip_bad_files) {
      std::lock_guard<std::mutex> lock(bad_mutex_);
      if (bad_.count(i)) continue;
    }
    try {
      return {readImageFile(list_->paths[u], options_.decode), list_->labels[u], i};
    } catch (const IoError& e) {
      if (!options_.skip_bad_files) throw;
      std::lock_guard<std::mutex> lock(bad_mutex_);
      if (bad_.insert(i).second) {
        std::fprintf(stderr, "warning: skip_bad_files: skipping %s (%zu bad files so far)\n", e.what(),
                     bad_.size());
      }
    }
  }
  throw IoError("ImageFolder: none of the " + std::to_string(n) + " image files decodes (the first is " +
                list_->paths.front() + ")");
}

Example ImageFolder::get(int64_t index) const {
  LabeledImage s = loadImage(index);
  Example e;
  e.input = pipeline_->apply(std::move(s.image), epoch_.load(), index);
  e.target = Tensor::scalar(static_cast<double>(s.label), DType::i64);
  return e;
}

int64_t ImageFolder::skippedFiles() const {
  std::lock_guard<std::mutex> lock(bad_mutex_);
  return static_cast<int64_t>(bad_.size());
}

}  // namespace lockstep::data
