// image_folder (data/datasets/image_folder.h, image_file_list.h): torchvision's ImageFolder scan,
// flat list files, decoding errors and skip_bad_files, and the registry entry the trainer loads.
#include "lockstep/data/datasets/image_folder.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "data_test_util.h"
#include "lockstep/data/data_loader.h"
#include "lockstep/data/datasets/image_file_list.h"
#include "lockstep/data/datasets/registry.h"
#include "lockstep/data/file_bytes.h"
#include "lockstep/data/image_codecs/jpeg_codec.h"
#include "lockstep/data/image_codecs/png_codec.h"
#include "lockstep/data/samplers/distributed_sampler.h"
#include "lockstep/data/transforms/center_crop.h"
#include "lockstep/data/transforms/random_resized_crop.h"
#include "lockstep/data/transforms/resize.h"
#include "lockstep/util/error.h"

namespace lockstep::data {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::throwsWith;

// A colour image whose pixels depend on `tag`, so files can be told apart.
Image patterned(int64_t h, int64_t w, int64_t channels, int tag) {
  Image im = Image::zeros(h, w, channels);
  for (size_t i = 0; i < im.data.size(); ++i) im.data[i] = static_cast<uint8_t>(tag * 40 + (i % 7) * 3);
  return im;
}

void writeJpeg(const std::string& path, const Image& im) {
  fs::create_directories(fs::path(path).parent_path());
  writeFileBytes(path, encodeJpeg(im, 90));
}

void writePng(const std::string& path, const Image& im) {
  fs::create_directories(fs::path(path).parent_path());
  writeFileBytes(path, encodePng(im));
}

void writeText(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

std::shared_ptr<const ImagePipeline> cropPipeline(int64_t size) {
  return std::make_shared<ImagePipeline>(
      std::vector<std::shared_ptr<const ImageTransform>>{
          std::make_shared<Resize>(ResizeOptions{.size = size}),
          std::make_shared<CenterCrop>(CenterCropOptions{.height = size, .width = size})},
      ImageToTensor());
}

// train/c/i.jpg and val/c/i.jpg the same 16x20 image for i < 4; options cropping them to 8 from 10.
DatasetOptions sameImagesInTrainAndVal(const TempDir& d) {
  for (const char* split : {"train", "val"})
    for (int i = 0; i < 4; ++i)
      writeJpeg(d.file(std::string(split) + "/c/" + std::to_string(i) + ".jpg"), patterned(16, 20, 3, i));
  DatasetOptions o;
  o.root = d.str();
  o.image_size = 8;
  o.resize_size = 10;
  return o;
}

TEST(ImageFolderScan, classes_are_sorted_folder_names_and_files_sorted_below_them) {
  TempDir d;
  const std::string root = d.file("train");
  writeJpeg(root + "/dog/b.jpg", patterned(4, 4, 3, 1));
  writeJpeg(root + "/dog/a.JPEG", patterned(4, 4, 3, 2));     // extensions ignore case
  writeJpeg(root + "/dog/sub/c.jpg", patterned(4, 4, 3, 3));  // below the class folder too
  writePng(root + "/Cat/x.Png", patterned(4, 4, 3, 4));
  writeJpeg(root + "/ant/z.jpeg", patterned(4, 4, 3, 5));
  writeText(root + "/ant/notes.txt", "not an image");  // skipped, as torchvision does
  writeText(root + "/ant/.DS_Store", "");
  writeText(root + "/README.md", "a file beside the class folders is no class");
  const ImageFileList list = scanImageFolder(root);
  // Python's sorted(): by code point, so upper case first.
  EXPECT_EQ(list.classes, (std::vector<std::string>{"Cat", "ant", "dog"}));
  EXPECT_EQ(list.num_classes, 3);
  EXPECT_EQ(list.paths,
            (std::vector<std::string>{root + "/Cat/x.Png", root + "/ant/z.jpeg", root + "/dog/a.JPEG",
                                      root + "/dog/b.jpg", root + "/dog/sub/c.jpg"}));
  EXPECT_EQ(list.labels, (std::vector<int64_t>{0, 1, 2, 2, 2}));
}

// Links to directories are followed as os.walk(followlinks=True) does: a directory reached twice
// is listed twice (torchvision's ImageFolder counts its files twice), and a link back up its own
// path ends there instead of descending forever.
TEST(ImageFolderScan, linked_directories_are_listed_as_os_walk_lists_them) {
  TempDir d;
  const std::string root = d.file("train");
  writeJpeg(root + "/c/real/r.jpg", patterned(4, 4, 3, 1));
  fs::create_directory_symlink("real", root + "/c/alias");
  fs::create_directory_symlink("..", root + "/c/real/up");  // a cycle: c/real/up/real/up/...
  writeJpeg(root + "/d/own.jpg", patterned(4, 4, 3, 2));
  fs::create_directory_symlink("../c", root + "/d/link");
  const ImageFileList list = scanImageFolder(root);
  EXPECT_EQ(list.classes, (std::vector<std::string>{"c", "d"}));
  // sorted() orders os.walk's tuples by directory: d's own files before those of d/link.
  EXPECT_EQ(list.paths,
            (std::vector<std::string>{root + "/c/alias/r.jpg", root + "/c/real/r.jpg", root + "/d/own.jpg",
                                      root + "/d/link/alias/r.jpg", root + "/d/link/real/r.jpg"}));
  EXPECT_EQ(list.labels, (std::vector<int64_t>{0, 0, 1, 1, 1}));
}

TEST(ImageFolderScan, torchvision_extension_list_ignoring_case) {
  for (const char* yes :
       {"a.jpg", "a.JPG", "a.jpeg", "b.PNG", "c.ppm", "d.bmp", "e.pgm", "f.tif", "g.TIFF", "h.webp"})
    EXPECT_TRUE(hasImageExtension(yes)) << yes;
  for (const char* no : {"a.gif", "jpg", "a.jpg.txt", "a.jp", ".DS_Store", "README"})
    EXPECT_FALSE(hasImageExtension(no)) << no;
}

TEST(ImageFolderScan, empty_class_folder_is_an_error_naming_it) {
  TempDir d;
  writeJpeg(d.file("train/bird/1.jpg"), patterned(4, 4, 3, 1));
  fs::create_directories(d.file("train/empty"));
  writeText(d.file("train/fish/readme.txt"), "only a non-image file");
  EXPECT_TRUE(
      throwsWith<IoError>([&] { scanImageFolder(d.file("train")); },
                          {d.file("train"), "no valid file for the classes empty, fish", ".jpg, .jpeg"}));
}

TEST(ImageFolderScan, missing_directory_and_no_class_folder_are_errors) {
  TempDir d;
  EXPECT_TRUE(
      throwsWith<IoError>([&] { scanImageFolder(d.file("nope")); }, {d.file("nope"), "not a directory"}));
  writeJpeg(d.file("flat/1.jpg"), patterned(4, 4, 3, 1));
  EXPECT_TRUE(
      throwsWith<IoError>([&] { scanImageFolder(d.file("flat")); }, {d.file("flat"), "class folder"}));
}

TEST(ImageFileListFile, path_label_lines_and_csv_with_header) {
  TempDir d;
  writeText(d.file("lists/train.txt"), "# comment\na/1.jpg 3\n\nb dir/2.jpg\t0\r\n/abs/3.png 1\n");
  const ImageFileList txt = readImageList(d.file("lists/train.txt"), d.file("lists"));
  EXPECT_EQ(txt.paths, (std::vector<std::string>{d.file("lists") + "/a/1.jpg",
                                                 d.file("lists") + "/b dir/2.jpg", "/abs/3.png"}));
  EXPECT_EQ(txt.labels, (std::vector<int64_t>{3, 0, 1}));
  EXPECT_EQ(txt.num_classes, 4);
  EXPECT_TRUE(txt.classes.empty());
  writeText(d.file("v.csv"), "path,label\nx.jpg,1\ny, z.jpg,0\n");
  const ImageFileList csv = readImageList(d.file("v.csv"), d.str());
  EXPECT_EQ(csv.paths, (std::vector<std::string>{d.file("x.jpg"), d.file("y, z.jpg")}));
  EXPECT_EQ(csv.labels, (std::vector<int64_t>{1, 0}));
}

TEST(ImageFileListFile, malformed_lines_are_errors_naming_file_and_line) {
  TempDir d;
  writeText(d.file("bad.txt"), "a.jpg 1\nb.jpg cat\n");
  EXPECT_TRUE(throwsWith<IoError>([&] { readImageList(d.file("bad.txt"), d.str()); },
                                  {d.file("bad.txt") + ":2", "PATH LABEL", "b.jpg cat"}));
  writeText(d.file("neg.csv"), "a.jpg,-1\n");
  EXPECT_TRUE(
      throwsWith<IoError>([&] { readImageList(d.file("neg.csv"), d.str()); }, {d.file("neg.csv") + ":1"}));
  writeText(d.file("empty.txt"), "\n# nothing\n");
  EXPECT_TRUE(throwsWith<IoError>([&] { readImageList(d.file("empty.txt"), d.str()); }, {"no samples"}));
  EXPECT_TRUE(throwsWith<IoError>([&] { readImageList(d.file("none.txt"), d.str()); }, {d.file("none.txt")}));
}

// One folder with the awkward files: grey JPEG, PNG with alpha, 1x1, smaller than the crop.
struct AwkwardFolder {
  TempDir d;
  ImageFileList list;
  AwkwardFolder() {
    writeJpeg(d.file("a/grey.jpg"), patterned(20, 30, 1, 1));
    writePng(d.file("a/rgba.png"), patterned(9, 5, 4, 2));
    writeJpeg(d.file("b/one.jpg"), patterned(1, 1, 3, 3));
    writeJpeg(d.file("b/small.jpg"), patterned(5, 7, 3, 4));
    list = scanImageFolder(d.str());
  }
};

TEST(ImageFolderDataset, awkward_images_all_become_same_size_rgb_tensors) {
  AwkwardFolder f;
  ImageFolder ds(f.list, cropPipeline(16));
  ASSERT_EQ(ds.size(), 4);
  for (int64_t i = 0; i < ds.size(); ++i) {
    const LabeledImage li = ds.loadImage(i);
    EXPECT_EQ(li.image.channels, 3) << f.list.paths[static_cast<size_t>(i)];
    EXPECT_EQ(li.source_index, i);
    const Example e = ds.get(i);
    EXPECT_EQ(e.input.shape(), (Shape{3, 16, 16})) << f.list.paths[static_cast<size_t>(i)];
    EXPECT_EQ(e.target.item<int64_t>(), i < 2 ? 0 : 1);
  }
  EXPECT_EQ(ds.loadImage(2).image.height, 1);
  // A loader's worker gets get()'s input from loadImage and the pipeline.
  ds.setEpoch(3);
  const Tensor via_parts = ds.pipeline().apply(ds.loadImage(1).image, ds.epoch(), 1).contiguous();
  EXPECT_EQ(via_parts.toVector<float>(), ds.get(1).input.contiguous().toVector<float>());
  // CenterCrop alone on an image smaller than the crop pads it with black, as torchvision does.
  auto pad_only = std::make_shared<ImagePipeline>(
      std::vector<std::shared_ptr<const ImageTransform>>{
          std::make_shared<CenterCrop>(CenterCropOptions{.height = 9, .width = 9})},
      ImageToTensor());
  ImageFolder padded(f.list, pad_only);
  const Tensor small = padded.get(3).input.contiguous();  // b/small.jpg, 5x7
  EXPECT_EQ(small.shape(), (Shape{3, 9, 9}));
  const std::vector<float> v = small.toVector<float>();
  EXPECT_EQ(v[0], 0.0f);          // top-left corner: padding
  EXPECT_GT(v[4 * 9 + 4], 0.0f);  // centre: the image
  // Random crops of every image, 1x1 included, still give the crop's size.
  auto rrc = std::make_shared<ImagePipeline>(
      std::vector<std::shared_ptr<const ImageTransform>>{
          std::make_shared<RandomResizedCrop>(RandomResizedCropOptions{.height = 8, .width = 8})},
      ImageToTensor());
  ImageFolder train(f.list, rrc);
  const Batch b = train.gather({0, 1, 2, 3});
  EXPECT_EQ(b.input.shape(), (Shape{4, 3, 8, 8}));
}

TEST(ImageFolderDataset, corrupt_file_is_an_error_naming_it_or_a_counted_skip) {
  TempDir d;
  writeJpeg(d.file("c/0.jpg"), patterned(8, 8, 3, 1));
  std::vector<uint8_t> jpeg = encodeJpeg(patterned(32, 32, 3, 2), 90);
  jpeg.resize(jpeg.size() - 40);  // truncated inside the scan
  writeFileBytes(d.file("c/1.jpg"), jpeg);
  writeText(d.file("c/2.jpg"), "not a jpeg at all");
  writeJpeg(d.file("c/3.jpg"), patterned(8, 8, 3, 3));
  const ImageFileList list = scanImageFolder(d.str());
  ImageFolder strict(list, cropPipeline(4));
  EXPECT_TRUE(throwsWith<IoError>([&] { strict.get(1); }, {d.file("c/1.jpg"), "truncated"}));
  EXPECT_TRUE(throwsWith<IoError>([&] { strict.get(2); }, {d.file("c/2.jpg"), "neither JPEG nor PNG"}));

  ImageFolder lenient(list, cropPipeline(4), ImageFolderOptions{.decode = {}, .skip_bad_files = true});
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(lenient.loadImage(1).source_index, 3);  // 1 and 2 are bad: 3 takes their place
  EXPECT_EQ(lenient.loadImage(2).source_index, 3);
  EXPECT_EQ(lenient.loadImage(1).source_index, 3);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(lenient.skippedFiles(), 2);
  EXPECT_NE(log.find(d.file("c/1.jpg")), std::string::npos) << log;
  EXPECT_NE(log.find(d.file("c/2.jpg")), std::string::npos) << log;
  EXPECT_EQ(log.find("skipping", log.find("skipping", log.find("skipping") + 1) + 1), std::string::npos)
      << "each bad file is logged once: " << log;
  const Batch b = lenient.gather({0, 1, 2, 3});
  EXPECT_EQ(b.input.shape(), (Shape{4, 3, 4, 4}));
}

TEST(ImageFolderDataset, sharding_over_1_to_4_ranks_covers_every_image_each_epoch) {
  TempDir d;
  const int n = 11;  // not a multiple of 2, 3 or 4: the padding repeats a few
  for (int i = 0; i < n; ++i)
    writeJpeg(d.file("k" + std::to_string(i % 3) + "/" + std::to_string(i) + ".jpg"), patterned(2, 2, 3, i));
  ImageFolder ds(scanImageFolder(d.str()), cropPipeline(2));
  for (int world = 1; world <= 4; ++world) {
    for (uint64_t epoch : {0, 1}) {
      std::multiset<std::string> seen;
      for (int rank = 0; rank < world; ++rank) {
        DistributedSampler s(n, {.num_replicas = world, .rank = rank, .shuffle = true, .seed = 7});
        s.setEpoch(epoch);
        for (int64_t i : s.epochIndices(epoch))
          seen.insert(ds.files().paths[static_cast<size_t>(ds.loadImage(i).source_index)]);
      }
      const int64_t padded = (n + world - 1) / world * world;
      EXPECT_EQ(static_cast<int64_t>(seen.size()), padded) << world << " ranks";
      std::set<std::string> distinct(seen.begin(), seen.end());
      EXPECT_EQ(static_cast<int>(distinct.size()), n) << world << " ranks, epoch " << epoch;
      for (const auto& p : distinct) EXPECT_LE(seen.count(p), 2u) << p;  // padding repeats each at most once
    }
  }
}

TEST(ImageFolderRegistry, loads_train_and_val_folders_with_class_names_and_same_size_batches) {
  TempDir d;
  for (const char* split : {"train", "val"})
    for (const char* cls : {"zebra", "apple"})
      for (int i = 0; i < 3; ++i)
        writeJpeg(d.file(std::string(split) + "/" + cls + "/" + std::to_string(i) + ".jpg"),
                  patterned(12 + i, 20 - i, 3, i));
  const DatasetInfo& info = findDataset("image_folder");
  DatasetOptions o;
  o.root = d.str();
  o.image_size = 8;
  o.resize_size = 10;
  info.check_files(o);
  const DatasetSplits s = info.load(o);
  EXPECT_EQ(s.classes, (std::vector<std::string>{"apple", "zebra"}));
  EXPECT_EQ(s.train->size(), 6);
  EXPECT_EQ(s.test->size(), 6);
  DataLoader serial(s.train, {.batch_size = 4, .num_workers = 0});
  DataLoader threaded(s.train, {.batch_size = 4, .num_workers = 2});
  std::vector<Batch> a, b;
  for (Batch& x : serial) a.push_back(x);
  for (Batch& x : threaded) b.push_back(x);
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(a[0].input.shape(), (Shape{4, 3, 8, 8}));
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].indices, b[i].indices);
    ASSERT_EQ(a[i].input.nbytes(), b[i].input.nbytes());
    EXPECT_EQ(std::memcmp(a[i].input.dataPtr(), b[i].input.dataPtr(), a[i].input.nbytes()), 0)
        << "the same crops for any worker count";
  }
  // A val folder whose classes differ would shift the class indices: refused.
  fs::create_directories(d.file("val/mango"));
  writeJpeg(d.file("val/mango/0.jpg"), patterned(4, 4, 3, 0));
  EXPECT_TRUE(throwsWith<IoError>([&] { info.load(o); }, {"different class folders"}));
  o.root = d.file("missing");
  EXPECT_TRUE(
      throwsWith<IoError>([&] { info.check_files(o); }, {d.file("missing") + "/train", "does not exist"}));
}

// The config's transforms reach the training pipeline: no flip gives other tensors than the
// default's, and so does a colour jitter; validation is the same either way.
TEST(ImageFolderRegistry, training_transforms_follow_the_options) {
  TempDir d;
  DatasetOptions o = sameImagesInTrainAndVal(d);
  o.seed = 3;
  auto first = [](const DatasetSplits& s, bool train) {
    const Dataset& ds = train ? *s.train : *s.test;
    std::vector<float> all;
    for (int64_t i = 0; i < ds.size(); ++i) {
      const std::vector<float> v = ds.get(i).input.contiguous().toVector<float>();
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  const DatasetSplits base = findDataset("image_folder").load(o);
  o.horizontal_flip = false;
  const DatasetSplits no_flip = findDataset("image_folder").load(o);
  o.horizontal_flip = true;
  o.color_jitter = {0.4, 0.4, 0.4, 0.1};
  const DatasetSplits jitter = findDataset("image_folder").load(o);
  o.color_jitter = {0, 0, 0, 0};
  o.crop_scale = {1.0, 1.0};
  o.crop_ratio = {16.0 / 20.0, 16.0 / 20.0};  // the whole image, every time
  const DatasetSplits whole = findDataset("image_folder").load(o);
  EXPECT_NE(first(base, true), first(no_flip, true));
  EXPECT_NE(first(base, true), first(jitter, true));
  EXPECT_NE(first(base, true), first(whole, true));
  EXPECT_EQ(first(whole, true), first(findDataset("image_folder").load(o), true));  // deterministic
  EXPECT_EQ(first(base, false), first(jitter, false));
  EXPECT_EQ(first(base, false), first(no_flip, false));
  o.color_jitter = {0, 0, 0, 0.7};
  EXPECT_THROW(findDataset("image_folder").load(o), ValueError);  // hue past 0.5
}

// data.val_split on an image folder: the held-out files are seen as val/ is seen (Resize +
// CenterCrop, the same tensors every epoch), index for index the training files.
TEST(ImageFolderRegistry, the_training_files_as_evaluation_sees_them_for_val_split) {
  TempDir d;
  DatasetOptions o = sameImagesInTrainAndVal(d);
  EXPECT_EQ(findDataset("image_folder").load(o).train_for_eval, nullptr);  // nothing held out
  o.val_split = 0.5;
  const DatasetSplits s = findDataset("image_folder").load(o);
  ASSERT_NE(s.train_for_eval, nullptr);
  ASSERT_EQ(s.train_for_eval->size(), s.train->size());
  for (int64_t i = 0; i < s.train->size(); ++i) {
    // val/i.jpg is train/i.jpg's image: the evaluation view of a training file is val's tensor.
    const auto v = [](const Dataset& ds, int64_t i) {
      return ds.get(i).input.contiguous().toVector<float>();
    };
    EXPECT_EQ(v(*s.train_for_eval, i), v(*s.test, i)) << i;
    s.train_for_eval->setEpoch(3);
    EXPECT_EQ(v(*s.train_for_eval, i), v(*s.test, i)) << i;
    s.train_for_eval->setEpoch(0);
  }
}

TEST(ImageFolderRegistry, list_files_replace_the_folders) {
  TempDir d;
  writeJpeg(d.file("img/a.jpg"), patterned(6, 6, 3, 1));
  writeJpeg(d.file("img/b.jpg"), patterned(6, 6, 3, 2));
  writeText(d.file("train.txt"), "img/a.jpg 0\nimg/b.jpg 4\n");
  writeText(d.file("val.csv"), "path,label\nimg/b.jpg,4\n");
  DatasetOptions o;
  o.root = d.str();
  o.image_size = 4;
  o.resize_size = 4;
  o.train_list = "train.txt";
  o.val_list = "val.csv";
  const DatasetSplits s = findDataset("image_folder").load(o);
  EXPECT_TRUE(s.classes.empty());
  EXPECT_EQ(s.train->size(), 2);
  EXPECT_EQ(s.test->size(), 1);
  EXPECT_EQ(s.test->get(0).target.item<int64_t>(), 4);
}

}  // namespace
}  // namespace lockstep::data
