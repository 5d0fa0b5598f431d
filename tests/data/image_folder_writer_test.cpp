// writeImageFolder (`lockstep data make-image-folder`): real JPEG files in torchvision's layout,
// made from Fashion-MNIST or CIFAR-10 binaries, that scanImageFolder reads back.
#include "lockstep/data/datasets/image_folder_writer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "data_test_util.h"
#include "lockstep/data/datasets/cifar.h"
#include "lockstep/data/datasets/image_file_list.h"
#include "lockstep/data/file_bytes.h"
#include "lockstep/data/image_codecs/image_file.h"
#include "lockstep/util/error.h"

namespace lockstep::data {
namespace {

using testing::TempDir;
using testing::throwsWith;

constexpr const char* kFashionMnist = "/usr/share/datasets/fashion-mnist";

// Writer options reading a synthetic CIFAR-10 written under d/cifar.
ImageFolderWriterOptions fromSyntheticCifar(const TempDir& d, const SyntheticCifarOptions& cifar) {
  std::filesystem::create_directories(d.file("cifar"));
  writeSyntheticCifar10(d.file("cifar"), cifar);
  ImageFolderWriterOptions o;
  o.source = "cifar10";
  o.source_root = d.file("cifar");
  return o;
}

TEST(ImageFolderWriter, cifar_binaries_become_a_folder_of_varied_jpegs) {
  TempDir d;
  ImageFolderWriterOptions o = fromSyntheticCifar(d, {.train_per_file = 40, .test_samples = 60, .seed = 3});
  o.classes = 3;
  o.train_per_class = 4;
  o.val_per_class = 2;
  o.min_side = 20;
  o.max_side = 30;
  const ImageFolderWriterResult r = writeImageFolder(d.file("out"), o);
  EXPECT_EQ(r.classes, (std::vector<std::string>{"airplane", "automobile", "bird"}));
  EXPECT_EQ(r.train_files, 12);
  EXPECT_EQ(r.val_files, 6);
  const ImageFileList train = scanImageFolder(d.file("out/train"));
  EXPECT_EQ(train.classes, r.classes);
  ASSERT_EQ(train.paths.size(), 12u);
  EXPECT_TRUE(train.paths[0].ends_with("airplane/train_00000.JPEG")) << train.paths[0];
  for (const std::string& p : train.paths) {
    const Image im = readImageFile(p);
    EXPECT_GE(std::min(im.height, im.width), 20) << p;
    EXPECT_LE(std::min(im.height, im.width), 30) << p;
    EXPECT_LE(std::max(im.height, im.width), 41) << p;  // aspect ratio within 4:3
  }
  EXPECT_EQ(scanImageFolder(d.file("out/val")).paths.size(), 6u);
  // The same options give the same bytes.
  writeImageFolder(d.file("again"), o);
  EXPECT_EQ(readFileBytes(d.file("again/val/bird/val_00001.JPEG")),
            readFileBytes(d.file("out/val/bird/val_00001.JPEG")));
  // The same data as its downloaded .tar.gz (data.root's forms, cifar.h): the same files.
  ASSERT_EQ(std::system(("cd " + d.file("") +
                         " && mv cifar cifar-10-batches-bin && tar czf c.tar.gz cifar-10-batches-bin")
                            .c_str()),
            0);
  o.source_root = d.file("c.tar.gz");
  writeImageFolder(d.file("from_archive"), o);
  EXPECT_EQ(readFileBytes(d.file("from_archive/val/bird/val_00001.JPEG")),
            readFileBytes(d.file("out/val/bird/val_00001.JPEG")));
}

TEST(ImageFolderWriter, fashion_mnist_classes_sort_into_torchvision_order) {
  if (!std::filesystem::exists(kFashionMnist))
    GTEST_SKIP() << kFashionMnist << " missing: apt install dataset-fashion-mnist";
  TempDir d;
  const ImageFolderWriterOptions o{.source_root = "",
                                   .classes = 4,
                                   .train_per_class = 2,
                                   .val_per_class = 1,
                                   .min_side = 28,
                                   .max_side = 28};
  const ImageFolderWriterResult r = writeImageFolder(d.file("fm"), o);
  EXPECT_EQ(r.classes, (std::vector<std::string>{"Dress", "Pullover", "T-shirt_top", "Trouser"}));
  EXPECT_EQ(scanImageFolder(d.file("fm/train")).paths.size(), 8u);
}

TEST(ImageFolderWriter, refuses_a_non_empty_directory_bad_options_and_short_sources) {
  TempDir d;
  ImageFolderWriterOptions o = fromSyntheticCifar(d, {.train_per_file = 10, .test_samples = 10, .seed = 1});
  EXPECT_TRUE(throwsWith<IoError>([&] { writeImageFolder(d.str(), o); }, {d.str(), "not empty"}));
  o.train_per_class = 1000;
  EXPECT_TRUE(
      throwsWith<IoError>([&] { writeImageFolder(d.file("a"), o); }, {d.file("cifar"), "only", "asked for"}));
  o.classes = 11;
  EXPECT_TRUE(throwsWith<ValueError>([&] { writeImageFolder(d.file("b"), o); }, {"classes must be 1..10"}));
  o = {};
  o.source = "imagenet";
  EXPECT_TRUE(throwsWith<ValueError>([&] { writeImageFolder(d.file("c"), o); },
                                     {"imagenet", "fashion_mnist or cifar10"}));
  o.source = "cifar10";
  EXPECT_TRUE(throwsWith<ValueError>([&] { writeImageFolder(d.file("c"), o); }, {"--source-root"}));
}

}  // namespace
}  // namespace lockstep::data
