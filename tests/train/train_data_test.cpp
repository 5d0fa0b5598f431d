// train::loadTrainData's wiring of the data config to torchvision's meanings: random_crop pads with
// black (its normalised value per channel, DatasetSplits::black), and data.val_split on an image
// folder holds out files that validation sees as val/ is seen (resized and center-cropped).
#include "lockstep/train/train_data.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "data/data_test_util.h"
#include "lockstep/data.h"

using namespace lockstep;

TEST(TrainData, random_crop_pads_with_black_as_torchvision) {
  data::testing::TempDir dir;
  data::writeSyntheticCifar10(dir.str(), {.train_per_file = 4, .test_samples = 2, .seed = 5});
  train::DataConfig c;
  c.dataset = "cifar10";
  c.root = dir.str();
  c.random_crop = true;
  const train::TrainData d = train::loadTrainData(c, 1);
  const data::CifarOptions stats;
  std::set<float> black;
  for (int ch = 0; ch < 3; ++ch) black.insert(static_cast<float>((0.0 - stats.mean[ch]) / stats.std[ch]));
  int padded = 0;
  for (int64_t i = 0; i < d.train->size(); ++i) {
    const std::vector<float> v = d.train->get(i).input.contiguous().toVector<float>();
    // The loader's values are (byte / 255 - mean) / std: none is exactly 0 (the mean's byte is not a
    // whole number), the old fill; black's value is where the window left the image.
    EXPECT_EQ(std::count(v.begin(), v.end(), 0.0f), 0) << "sample " << i;
    padded +=
        static_cast<int>(std::count_if(v.begin(), v.end(), [&](float x) { return black.count(x) > 0; }));
  }
  EXPECT_GT(padded, 0);
}

TEST(TrainData, image_folder_val_split_is_validated_as_val_is) {
  data::testing::TempDir dir;
  data::ImageFolderWriterOptions w;
  w.source = "cifar10";
  w.source_root = dir.file("cifar");
  w.classes = 2;
  w.train_per_class = 4;
  w.val_per_class = 1;
  w.min_side = 24;
  w.max_side = 40;
  std::filesystem::create_directories(w.source_root);
  data::writeSyntheticCifar10(w.source_root, {.train_per_file = 40, .test_samples = 60, .seed = 2});
  data::writeImageFolder(dir.file("images"), w);
  train::DataConfig c;
  c.dataset = "image_folder";
  c.root = dir.file("images");
  c.image_size = 16;
  c.resize_size = 20;
  c.val_split = 0.5;
  const train::TrainData d = train::loadTrainData(c, 1);
  ASSERT_EQ(d.val->size(), 4);
  std::vector<std::vector<float>> first;
  for (int64_t i = 0; i < d.val->size(); ++i)
    first.push_back(d.val->get(i).input.contiguous().toVector<float>());
  // Another epoch: the training files are cropped and flipped anew, the held-out ones are not.
  d.val->setEpoch(7);
  d.train->setEpoch(7);
  for (int64_t i = 0; i < d.val->size(); ++i)
    EXPECT_EQ(d.val->get(i).input.contiguous().toVector<float>(), first[static_cast<size_t>(i)]) << i;
}
