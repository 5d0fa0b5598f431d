#include "lockstep/data/datasets/registry.h"

#include <cmath>
#include <filesystem>
#include <numeric>

#include "lockstep/data/datasets/cifar.h"
#include "lockstep/data/datasets/image_folder.h"
#include "lockstep/data/datasets/mnist.h"
#include "lockstep/data/datasets/subset.h"
#include "lockstep/data/datasets/synthetic_dataset.h"
#include "lockstep/data/datasets/text_corpus.h"
#include "lockstep/data/datasets/token_window_dataset.h"
#include "lockstep/data/transforms/center_crop.h"
#include "lockstep/data/transforms/color_jitter.h"
#include "lockstep/data/transforms/random_horizontal_flip.h"
#include "lockstep/data/transforms/random_resized_crop.h"
#include "lockstep/data/transforms/resize.h"
#include "lockstep/util/error.h"
#include "lockstep/util/suggest.h"

namespace lockstep::data {

namespace {

void checkMnistFiles(const DatasetOptions& o) {
  for (const char* base : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                           "t10k-labels-idx1-ubyte"}) {
    findMnistFile(o.root, base);
  }
}

// MNIST and Fashion-MNIST differ only in their pixel statistics.
DatasetSplits loadMnistSplits(const DatasetOptions& o, double mean, double std) {
  MnistOptions mo;
  mo.mean = o.normalize_mean.value_or(mean);
  mo.std = o.normalize_std.value_or(std);
  DatasetSplits s;
  s.train = std::make_shared<TensorDataset>(loadMnist(o.root, Split::train, mo));
  s.test = std::make_shared<TensorDataset>(loadMnist(o.root, Split::test, mo));
  s.black = {static_cast<float>((0.0 - mo.mean) / mo.std)};  // the loader's value for a 0 byte
  return s;
}

DatasetSplits loadCifar10Splits(const DatasetOptions& o) {
  CifarOptions co;
  if (o.normalize_mean) co.mean = {*o.normalize_mean, *o.normalize_mean, *o.normalize_mean};
  if (o.normalize_std) co.std = {*o.normalize_std, *o.normalize_std, *o.normalize_std};
  DatasetSplits s;
  s.train = std::make_shared<TensorDataset>(loadCifar10(o.root, Split::train, co));
  s.test = std::make_shared<TensorDataset>(loadCifar10(o.root, Split::test, co));
  for (int c = 0; c < 3; ++c) s.black.push_back(static_cast<float>((0.0 - co.mean[c]) / co.std[c]));
  return s;
}

// One synthetic set (one teacher) split into train and test by position.
DatasetSplits loadSyntheticSplits(const DatasetOptions& o) {
  SyntheticDatasetOptions so;
  so.size = o.size + o.test_size;
  so.input_shape = Shape(o.input_shape.begin(), o.input_shape.end());
  so.num_classes = o.num_classes;
  so.seed = o.seed;
  auto all = std::make_shared<SyntheticDataset>(so);
  std::vector<int64_t> train(static_cast<size_t>(o.size)), test(static_cast<size_t>(o.test_size));
  std::iota(train.begin(), train.end(), 0);
  std::iota(test.begin(), test.end(), o.size);
  DatasetSplits s;
  s.train = std::make_shared<Subset>(all, train);
  s.test = std::make_shared<Subset>(all, test);
  return s;
}

// Train and validation windows from the two token streams; the validation set is also the test set.
DatasetSplits tokenWindowSplits(const DatasetOptions& o, const TokenSplit& split, int64_t vocab_size) {
  LOCKSTEP_ENFORCE(split.val, ValueError, "data: ", o.root,
                   " has no validation tokens (val.bin, or data.val_split > 0 for text)");
  DatasetSplits s;
  s.train = std::make_shared<TokenWindowDataset>(split.train, o.block_size, vocab_size);
  s.val = std::make_shared<TokenWindowDataset>(split.val, o.block_size, vocab_size);
  s.test = s.val;
  s.vocab_size = vocab_size;
  return s;
}

// image_folder's two file lists: ROOT/train and ROOT/val class folders, or the list files.
ImageFileList imageFiles(const DatasetOptions& o, const std::string& list, const char* folder) {
  if (list.empty()) return scanImageFolder((std::filesystem::path(o.root) / folder).string());
  const std::filesystem::path path = std::filesystem::path(o.root) / list;  // an absolute list stays as it is
  return readImageList(path.string(), path.parent_path().string());
}

void checkImageFolderFiles(const DatasetOptions& o) {
  for (const auto& [list, folder] : {std::pair{o.train_list, "train"}, {o.val_list, "val"}}) {
    const std::filesystem::path p = std::filesystem::path(o.root) / (list.empty() ? folder : list);
    if (!std::filesystem::exists(p) && !list.empty()) {
      throw IoError(std::string(folder == std::string("train") ? "data.train_list" : "data.val_list") + ": " +
                    p.string() + " does not exist (a list file's path is relative to data.root)");
    }
    if (!std::filesystem::exists(p)) {
      throw IoError("data.root: " + p.string() + " does not exist (an image folder holds train/ and val/, " +
                    "each with one subfolder of images per class)");
    }
  }
}

// torchvision's ImageNet recipe: RandomResizedCrop + RandomHorizontalFlip to train, Resize +
// CenterCrop to validate, then ToTensor + Normalize (ImageNet's statistics unless the config's).
DatasetSplits loadImageFolderSplits(const DatasetOptions& o) {
  LOCKSTEP_ENFORCE(o.image_size >= 1 && o.resize_size >= 1, ValueError,
                   "data.image_size and data.resize_size must be >= 1, got ", o.image_size, " and ",
                   o.resize_size);
  ImageToTensorOptions to_tensor;
  to_tensor.mean = {0.485, 0.456, 0.406};
  to_tensor.std = {0.229, 0.224, 0.225};
  if (o.normalize_mean) to_tensor.mean.assign(3, *o.normalize_mean);
  if (o.normalize_std) to_tensor.std.assign(3, *o.normalize_std);
  to_tensor.dtype = o.image_dtype;
  RandomResizedCropOptions crop;
  crop.height = crop.width = o.image_size;
  crop.scale_min = o.crop_scale[0];
  crop.scale_max = o.crop_scale[1];
  crop.ratio_min = o.crop_ratio[0];
  crop.ratio_max = o.crop_ratio[1];
  std::vector<std::shared_ptr<const ImageTransform>> train_transforms{
      std::make_shared<RandomResizedCrop>(crop)};
  if (o.horizontal_flip) train_transforms.push_back(std::make_shared<RandomHorizontalFlip>());
  const auto& [brightness, contrast, saturation, hue] = o.color_jitter;
  if (brightness > 0 || contrast > 0 || saturation > 0 || hue > 0) {
    train_transforms.push_back(
        std::make_shared<ColorJitter>(ColorJitterOptions{brightness, contrast, saturation, hue}));
  }
  auto train_pipeline =
      std::make_shared<ImagePipeline>(std::move(train_transforms), ImageToTensor(to_tensor), o.seed);
  auto val_pipeline = std::make_shared<ImagePipeline>(
      std::vector<std::shared_ptr<const ImageTransform>>{
          std::make_shared<Resize>(ResizeOptions{.size = o.resize_size}),
          std::make_shared<CenterCrop>(CenterCropOptions{.height = o.image_size, .width = o.image_size})},
      ImageToTensor(to_tensor), o.seed);
  ImageFolderOptions train_options;
  train_options.skip_bad_files = o.skip_bad_files;
  train_options.decode.exif_transpose = o.exif_transpose;
  ImageFolderOptions val_options = train_options;
  if (o.dct_scaling) {
    // The smallest crop RandomResizedCrop takes (scale_min of the area) still has image_size
    // pixels across; validation resizes the shorter side to resize_size.
    train_options.decode.min_short_side =
        static_cast<int64_t>(std::ceil(static_cast<double>(o.image_size) / std::sqrt(crop.scale_min)));
    val_options.decode.min_short_side = o.resize_size;
  }
  ImageFileList train = imageFiles(o, o.train_list, "train"), val = imageFiles(o, o.val_list, "val");
  if (!train.classes.empty() && !val.classes.empty() && train.classes != val.classes) {
    throw IoError("data.root: " + o.root + "/train and " + o.root + "/val have different class folders (" +
                  std::to_string(train.classes.size()) + " and " + std::to_string(val.classes.size()) +
                  "): class indices would not agree; give both the same class folders");
  }
  DatasetSplits s;
  s.classes = train.classes;
  s.label_count = std::max(train.num_classes, val.num_classes);
  // What data.val_split holds out of train/ is validated as val/ is: resized and center-cropped.
  auto train_files = std::make_shared<const ImageFileList>(std::move(train));  // one copy for both views
  if (o.val_split > 0)
    s.train_for_eval = std::make_shared<ImageFolder>(train_files, val_pipeline, val_options);
  s.train = std::make_shared<ImageFolder>(train_files, train_pipeline, train_options);
  s.test = std::make_shared<ImageFolder>(std::move(val), val_pipeline, val_options);
  return s;
}

std::vector<DatasetInfo> builtinDatasets() {
  std::vector<DatasetInfo> r;
  {
    DatasetInfo d;
    d.name = "fashion_mnist";
    d.default_root = "/usr/share/datasets/fashion-mnist";
    d.keys = {"transforms"};
    d.check_files = checkMnistFiles;
    d.load = [](const DatasetOptions& o) { return loadMnistSplits(o, 0.2860, 0.3530); };
    r.push_back(std::move(d));
  }
  {
    DatasetInfo d;
    d.name = "mnist";
    d.keys = {"transforms"};
    d.check_files = checkMnistFiles;
    d.load = [](const DatasetOptions& o) {
      return loadMnistSplits(o, MnistOptions{}.mean, MnistOptions{}.std);
    };
    r.push_back(std::move(d));
  }
  {
    DatasetInfo d;
    d.name = "cifar10";
    d.keys = {"transforms"};
    d.root_hint =
        "set it to CIFAR-10's folder or its downloaded .tar.gz (python or binary version: torchvision's "
        "root, Paddle's cifar-10-python.tar.gz)";
    d.check_files = [](const DatasetOptions& o) { findCifar10(o.root); };
    d.load = loadCifar10Splits;
    r.push_back(std::move(d));
  }
  {
    DatasetInfo d;
    d.name = "image_folder";
    d.root_hint =
        "set it to a directory with train/ and val/, each with one subfolder of images per class "
        "(torchvision's "
        "ImageFolder layout; `lockstep data make-image-folder` writes a small one)";
    d.keys = {"image_size",  "resize_size", "skip_bad_files", "exif_transpose",
              "dct_scaling", "train_list",  "val_list",       "transforms"};
    d.check_files = checkImageFolderFiles;
    d.load = loadImageFolderSplits;
    r.push_back(std::move(d));
  }
  {
    DatasetInfo d;
    d.name = "synthetic";
    d.shape_from_options = true;
    d.keys = {"transforms", "size", "test_size", "num_classes", "input_shape"};
    d.load = loadSyntheticSplits;
    r.push_back(std::move(d));
  }
  {
    DatasetInfo d;
    d.name = "text";
    d.language = true;
    d.default_root = kFortunesDir;
    d.default_val_split = 0.1;
    d.check_files = [](const DatasetOptions& o) {
      if (!std::filesystem::exists(o.root)) readTextCorpus(o.root);  // its IoError says what to install
    };
    d.load = [](const DatasetOptions& o) {
      return tokenWindowSplits(o, splitTokens(readTextCorpus(o.root), o.val_split, o.root),
                               TokenDirMeta{}.vocab_size);
    };
    r.push_back(std::move(d));
  }
  {
    DatasetInfo d;
    d.name = "tokens";
    d.language = true;
    d.root_hint = "set it to a directory written by `lockstep data tokenize TEXT -o DIR`";
    d.check_files = [](const DatasetOptions& o) {
      if (!std::filesystem::exists(o.root + "/meta.json")) openTokenDir(o.root);
    };
    d.load = [](const DatasetOptions& o) {
      TokenDirMeta meta;
      TokenSplit split = openTokenDir(o.root, &meta);
      DatasetSplits s = tokenWindowSplits(o, split, meta.vocab_size);
      s.tokenizer = meta.tokenizer;
      return s;
    };
    r.push_back(std::move(d));
  }
  return r;
}

const std::vector<DatasetInfo>& registry() {
  static const std::vector<DatasetInfo> r = builtinDatasets();
  return r;
}

}  // namespace

const DatasetInfo& findDataset(const std::string& name) {
  for (const DatasetInfo& d : registry()) {
    if (d.name == name) return d;
  }
  const std::vector<std::string> names = datasetNames();
  std::string near = nearestKey(name, names), known;
  for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
  throw ValueError("unknown dataset " + name + (near.empty() ? "" : " (did you mean " + near + "?)") +
                   "; known: " + known);
}

std::vector<std::string> datasetNames() {
  std::vector<std::string> names;
  for (const DatasetInfo& d : registry()) names.push_back(d.name);
  return names;
}

std::vector<std::string> languageDatasetNames() {
  std::vector<std::string> names;
  for (const DatasetInfo& d : registry()) {
    if (d.language) names.push_back(d.name);
  }
  return names;
}

}  // namespace lockstep::data
