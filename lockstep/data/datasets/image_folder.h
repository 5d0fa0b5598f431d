#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "lockstep/data/dataset.h"
#include "lockstep/data/datasets/image_file_list.h"
#include "lockstep/data/image_codecs/decode_options.h"
#include "lockstep/data/transforms/image_pipeline.h"

namespace lockstep::data {

struct ImageFolderOptions {
  DecodeOptions decode;
  /// A file that fails to decode is skipped (counted, logged once to stderr) and the next
  /// decodable sample in index order takes its place, so sizes, sharding and batches stay as they
  /// were; otherwise its IoError (naming the file) ends the load.
  bool skip_bad_files = false;
};

/// A decoded sample: the image as decoded (8-bit RGB, HWC) and its class.
struct LabeledImage {
  Image image;
  int64_t label = 0;
  /// The sample whose file was decoded: the one asked for, or with skip_bad_files the one that
  /// took a bad file's place.
  int64_t source_index = 0;
};

/// torchvision's ImageFolder (or a flat list of files): sample i is file list.paths[i] decoded,
/// run through the pipeline (which must give every image the same size, e.g. ending in a crop),
/// with class list.labels[i].
///
/// Thread-safety: loadImage(), get() and gather() may run on any number of threads at once
/// (loader workers decode in parallel); setEpoch() must not race with them.
class ImageFolder : public Dataset {
 public:
  /// ValueError for a null pipeline or a list whose paths and labels differ in length.
  ImageFolder(ImageFileList list, std::shared_ptr<const ImagePipeline> pipeline,
              const ImageFolderOptions& options = {});
  /// The same over a list other datasets share (the training files seen by two pipelines).
  ImageFolder(std::shared_ptr<const ImageFileList> list, std::shared_ptr<const ImagePipeline> pipeline,
              const ImageFolderOptions& options = {});

  int64_t size() const override { return static_cast<int64_t>(list_->paths.size()); }
  /// loadImage(index), then the pipeline for (epoch, index): input f32 [3, H, W] (channels_last
  /// strides), target a 0-d i64 class.
  Example get(int64_t index) const override;
  void setEpoch(uint64_t epoch) override { epoch_.store(epoch); }

  /// Sample index's file decoded, before any transform: what a loader's worker calls.
  LabeledImage loadImage(int64_t index) const;
  /// The pipeline get() runs and the epoch it draws for: a loader that decodes with loadImage on its
  /// workers augments with pipeline().augment(image, epoch(), index) to get get()'s crops.
  const ImagePipeline& pipeline() const { return *pipeline_; }
  uint64_t epoch() const { return epoch_.load(); }
  /// The file list: class names (class_to_idx is name -> position), paths and labels.
  const ImageFileList& files() const { return *list_; }
  /// How many distinct files failed to decode and were skipped so far (skip_bad_files).
  int64_t skippedFiles() const;

 private:
  std::shared_ptr<const ImageFileList> list_;
  std::shared_ptr<const ImagePipeline> pipeline_;
  ImageFolderOptions options_;
  std::atomic<uint64_t> epoch_{0};
  mutable std::mutex bad_mutex_;
  mutable std::set<int64_t> bad_;  // samples whose files failed to decode
};

}  // namespace lockstep::data
