#include "lockstep/data/datasets/image_folder_writer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "lockstep/data/datasets/cifar.h"
#include "lockstep/data/datasets/idx_file.h"
#include "lockstep/data/datasets/mnist.h"
#include "lockstep/data/datasets/split.h"
#include "lockstep/data/file_bytes.h"
#include "lockstep/data/image_codecs/jpeg_codec.h"
#include "lockstep/data/transforms/image_resize.h"
#include "lockstep/data/transforms/transform.h"
#include "lockstep/util/error.h"

namespace lockstep::data {

namespace fs = std::filesystem;

namespace {

// Folder names: Fashion-MNIST's and CIFAR-10's class names, in their label order.
const std::vector<std::string> kFashionClasses = {
    "T-shirt_top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle_boot"};
const std::vector<std::string> kCifarClasses = {"airplane", "automobile", "bird",  "cat",  "deer",
                                                "dog",      "frog",       "horse", "ship", "truck"};

// Up to `per_class` images of each of the first `classes` labels, in file order.
using PerClass = std::vector<std::vector<Image>>;

PerClass fashionImages(const std::string& root, Split split, int64_t classes, int64_t per_class) {
  const std::string prefix = split == Split::train ? "train" : "t10k";
  const IdxArray images = readIdxFile(findMnistFile(root, prefix + "-images-idx3-ubyte"), kIdxImagesMagic);
  const IdxArray labels = readIdxFile(findMnistFile(root, prefix + "-labels-idx1-ubyte"), kIdxLabelsMagic);
  const int64_t h = images.dims[1], w = images.dims[2], n = std::min(images.dims[0], labels.dims[0]);
  PerClass out(static_cast<size_t>(classes));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t label = labels.data[static_cast<size_t>(i)];
    if (label >= classes || static_cast<int64_t>(out[static_cast<size_t>(label)].size()) >= per_class)
      continue;
    Image im = Image::zeros(h, w, 3);
    for (int64_t p = 0; p < h * w; ++p)
      std::fill_n(im.data.begin() + p * 3, 3, images.data[static_cast<size_t>(i * h * w + p)]);
    out[static_cast<size_t>(label)].push_back(std::move(im));
  }
  return out;
}

PerClass cifarImages(const std::string& root, Split split, int64_t classes, int64_t per_class) {
  PerClass out(static_cast<size_t>(classes));
  for (const CifarRaw& raw :
       readCifar10Split(findCifar10(root), split)) {  // either version, folder or archive
    const auto* pixels = static_cast<const uint8_t*>(raw.images.dataPtr());
    const auto* labels = static_cast<const int64_t*>(raw.labels.dataPtr());
    for (int64_t i = 0; i < raw.labels.numel(); ++i) {
      const int64_t label = labels[i];
      if (label >= classes || static_cast<int64_t>(out[static_cast<size_t>(label)].size()) >= per_class)
        continue;
      Image im = Image::zeros(32, 32, 3);
      for (int64_t c = 0; c < 3; ++c)  // CIFAR stores R, G, B planes
        for (int64_t p = 0; p < 32 * 32; ++p)
          im.data[static_cast<size_t>(p * 3 + c)] = pixels[i * 3072 + c * 1024 + p];
      out[static_cast<size_t>(label)].push_back(std::move(im));
    }
    const bool enough = std::all_of(
        out.begin(), out.end(), [&](const auto& v) { return static_cast<int64_t>(v.size()) >= per_class; });
    if (enough) break;
  }
  return out;
}

// Writes one split; returns the number of files.
int64_t writeSplit(const fs::path& dir, const PerClass& images, const std::vector<std::string>& names,
                   const ImageFolderWriterOptions& o, Split split) {
  int64_t written = 0;
  for (size_t c = 0; c < images.size(); ++c) {
    fs::create_directories(dir / names[c]);
    for (size_t k = 0; k < images[c].size(); ++k) {
      // Sizes drawn per (split, class, image), so they do not depend on the other options' counts.
      const TransformContext ctx{.seed = o.seed,
                                 .epoch = split == Split::train ? 0u : 1u,
                                 .index = static_cast<int64_t>(c << 32 | k),
                                 .slot = 0};
      const std::array<uint32_t, 4> r = transformRandom(ctx);
      const int64_t side =
          o.min_side +
          static_cast<int64_t>(unitFromWord(r[0]) * static_cast<double>(o.max_side - o.min_side + 1));
      const double ratio =
          std::exp(std::log(3.0 / 4.0) + unitFromWord(r[1]) * std::log(16.0 / 9.0));  // w / h
      const int64_t h =
          ratio >= 1 ? side : static_cast<int64_t>(std::lround(static_cast<double>(side) / ratio));
      const int64_t w =
          ratio >= 1 ? static_cast<int64_t>(std::lround(static_cast<double>(side) * ratio)) : side;
      char name[64];
      std::snprintf(name, sizeof name, "%s_%05zu.JPEG", split == Split::train ? "train" : "val", k);
      writeFileBytes((dir / names[c] / name).string(),
                     encodeJpeg(resizeImage(images[c][k], h, w), o.quality));
      ++written;
    }
  }
  return written;
}

}  // namespace

ImageFolderWriterResult writeImageFolder(const std::string& dir, const ImageFolderWriterOptions& o) {
  LOCKSTEP_ENFORCE(o.source == "fashion_mnist" || o.source == "cifar10", ValueError,
                   "make-image-folder: source ", o.source, " is unknown; use fashion_mnist or cifar10");
  LOCKSTEP_ENFORCE(o.classes >= 1 && o.classes <= 10, ValueError,
                   "make-image-folder: classes must be 1..10 (the source's), got ", o.classes);
  LOCKSTEP_ENFORCE(o.train_per_class >= 1 && o.val_per_class >= 1, ValueError,
                   "make-image-folder: images per class must be >= 1, got ", o.train_per_class, " and ",
                   o.val_per_class);
  LOCKSTEP_ENFORCE(o.min_side >= 1 && o.max_side >= o.min_side && o.max_side <= 4096, ValueError,
                   "make-image-folder: sides must satisfy 1 <= min_side <= max_side <= 4096, got ",
                   o.min_side, " and ", o.max_side);
  LOCKSTEP_ENFORCE(o.quality >= 1 && o.quality <= 100, ValueError,
                   "make-image-folder: quality must be 1..100");
  std::error_code ec;
  LOCKSTEP_ENFORCE(
      !fs::exists(dir, ec) || fs::is_empty(dir, ec), IoError, dir,
      " exists and is not empty: give a new directory (stale class folders would become classes)");
  std::string root = o.source_root;
  if (root.empty()) {
    LOCKSTEP_ENFORCE(
        o.source == "fashion_mnist", ValueError,
        "make-image-folder: cifar10 needs --source-root: CIFAR-10's folder or downloaded .tar.gz "
        "(python or binary version)");
    root = "/usr/share/datasets/fashion-mnist";
  }
  const bool fashion = o.source == "fashion_mnist";
  const std::vector<std::string>& all_names = fashion ? kFashionClasses : kCifarClasses;
  const std::vector<std::string> names(all_names.begin(), all_names.begin() + o.classes);
  ImageFolderWriterResult result;
  for (Split split : {Split::train, Split::test}) {
    const int64_t per_class = split == Split::train ? o.train_per_class : o.val_per_class;
    const PerClass images = fashion ? fashionImages(root, split, o.classes, per_class)
                                    : cifarImages(root, split, o.classes, per_class);
    for (size_t c = 0; c < images.size(); ++c) {
      LOCKSTEP_ENFORCE(static_cast<int64_t>(images[c].size()) == per_class, IoError, root, ": its ",
                       split == Split::train ? "training" : "test", " split has only ", images[c].size(),
                       " images of class ", names[c], ", ", per_class, " asked for");
    }
    const fs::path out = fs::path(dir) / (split == Split::train ? "train" : "val");
    (split == Split::train ? result.train_files : result.val_files) =
        writeSplit(out, images, names, o, split);
  }
  result.classes = names;
  std::sort(result.classes.begin(), result.classes.end());
  return result;
}

}  // namespace lockstep::data
