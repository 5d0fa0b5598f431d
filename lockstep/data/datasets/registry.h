#pragma once
// Datasets by name, as the trainer's config names them (data.dataset). Each entry says what the
// dataset is (token windows for a language model, or (input, class) samples), its defaults, the
// config keys only it reads, and how to check and load its files. The config parser, the trainer
// and their error messages all read this one list: adding a dataset is one entry in registry.cpp.
// Thread-safety: the registry is immutable; the functions are reentrant.
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/data/dataset.h"

namespace lockstep::data {

/// What a dataset's loader reads; the trainer fills it from its `data` config section.
struct DatasetOptions {
  /// The dataset's file or directory (DatasetInfo::default_root when the config leaves it unset).
  std::string root;
  /// Image datasets: one mean / std for every channel, replacing the dataset's own statistics.
  std::optional<double> normalize_mean, normalize_std;
  /// synthetic: train and test sample counts, one sample's shape and the class count.
  int64_t size = 1024, test_size = 256, num_classes = 10;
  std::vector<int64_t> input_shape{20};
  /// text: the last fraction of the corpus held out for validation (nanoGPT's split).
  double val_split = 0.0;
  /// Language datasets: windows of block_size + 1 tokens (the model's block size).
  int64_t block_size = 0;
  /// synthetic: the teacher's and the inputs' seed; image_folder: the augmentation's.
  uint64_t seed = 0;
  /// image_folder: the training crop (RandomResizedCrop) and validation crop (CenterCrop) side, and
  /// the shorter side validation images are resized to first (torchvision's ImageNet recipe).
  int64_t image_size = 224, resize_size = 256;
  /// image_folder: files that fail to decode are counted, logged and skipped (ImageFolderOptions).
  bool skip_bad_files = false;
  /// image_folder: apply EXIF orientation (torchvision's ImageFolder does not).
  bool exif_transpose = false;
  /// image_folder: decode JPEGs at a DCT scale (1/2, 1/4, 1/8) when the transforms would still
  /// sample them at full resolution (not torchvision's pixels; off by default).
  bool dct_scaling = false;
  /// image_folder: flat lists ("PATH LABEL" or CSV) instead of the train/ and val/ folders; relative
  /// to root.
  std::string train_list, val_list;
  /// image_folder: RandomResizedCrop's scale and ratio, whether RandomHorizontalFlip runs, and
  /// ColorJitter's brightness, contrast, saturation and hue (all 0: none), torchvision's meanings.
  std::array<double, 2> crop_scale{0.08, 1.0}, crop_ratio{3.0 / 4.0, 4.0 / 3.0};
  bool horizontal_flip = true;
  std::array<double, 4> color_jitter{0, 0, 0, 0};
  /// image_folder: the inputs' dtype after Normalize, f32 or bf16 (ImageToTensorOptions::dtype).
  DType image_dtype = DType::f32;
};

/// A loaded dataset: train and test sets, and for a language dataset its validation windows
/// (also the test set) and vocabulary.
struct DatasetSplits {
  std::shared_ptr<Dataset> train;
  std::shared_ptr<Dataset> val;  // language datasets only; null for the others
  std::shared_ptr<Dataset> test;
  /// Language datasets: the tokenizer's vocabulary (256 for bytes, meta.json's for a token directory).
  int64_t vocab_size = 0;
  /// Language datasets: the tokenizer that made the ids ("byte": lockstep's, whose ids are a text's
  /// bytes; a token directory's meta.json may name another, e.g. one written by nanoGPT's scripts).
  std::string tokenizer = "byte";
  /// Class i's name where the dataset has names (image_folder's class folders: torchvision's
  /// classes, class_to_idx = name -> i); empty otherwise.
  std::vector<std::string> classes;
  /// The labels run 0 .. label_count - 1 (classes.size(), or an image list's largest label + 1);
  /// 0 where the dataset does not say.
  int64_t label_count = 0;
  /// Image datasets normalised at load time: a black pixel's value per channel, (0 - mean) / std,
  /// what torchvision's padding (which comes before Normalize) becomes. Empty otherwise.
  std::vector<float> black;
  /// The training samples as an evaluation sees them, index for index, where that differs from
  /// `train` (image_folder: Resize + CenterCrop instead of the random crops and flips): what
  /// data.val_split holds out is taken from it. Null: `train` itself.
  std::shared_ptr<Dataset> train_for_eval;
};

struct DatasetInfo {
  std::string name;
  /// Token windows for a language model (input and target [block_size] token ids); otherwise
  /// (input, class index) samples.
  bool language = false;
  /// data.root when the config leaves it unset; empty: none.
  std::string default_root;
  /// When there is no default root, what data.root must name (the error for an unset root);
  /// empty: an unset root is left to the loader.
  std::string root_hint;
  /// data.val_split when the config leaves it unset.
  double default_val_split = 0.0;
  /// The samples' shape and class count are the config's (DatasetOptions::input_shape,
  /// num_classes), so a model can be sized from them (linear, mlp).
  bool shape_from_options = false;
  /// The data.* keys only this dataset reads, beyond kCommonDataKeys.
  std::vector<std::string> keys;
  /// Checks the files exist without loading them (for the launcher's parent process): IoError
  /// naming the missing file. Null: nothing on disk.
  std::function<void(const DatasetOptions&)> check_files;
  /// Loads the dataset: IoError naming the file when one is missing or corrupt, ValueError for
  /// options it cannot use.
  std::function<DatasetSplits(const DatasetOptions&)> load;
};

/// The data.* keys every dataset reads.
inline const std::vector<std::string> kCommonDataKeys = {"dataset", "root", "val_split", "num_workers"};

/// The named dataset; ValueError naming it, the nearest registered name and all of them otherwise.
const DatasetInfo& findDataset(const std::string& name);
/// The registered names, in registration order.
std::vector<std::string> datasetNames();
/// The registered names of the language datasets (DatasetInfo::language), in registration order.
std::vector<std::string> languageDatasetNames();

}  // namespace lockstep::data
