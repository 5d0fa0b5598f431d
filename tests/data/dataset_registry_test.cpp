// The dataset registry: names, traits, defaults, the keys each dataset reads, and loading through it.
#include <gtest/gtest.h>

#include <fstream>

#include "data_test_util.h"
#include "lockstep/data.h"
#include "lockstep/util/error.h"

namespace lockstep::data {
namespace {

using testing::TempDir;
using testing::throwsWith;

TEST(DatasetRegistry, names_in_registration_order) {
  EXPECT_EQ(datasetNames(), (std::vector<std::string>{"fashion_mnist", "mnist", "cifar10", "image_folder",
                                                      "synthetic", "text", "tokens"}));
  EXPECT_EQ(languageDatasetNames(), (std::vector<std::string>{"text", "tokens"}));
}

TEST(DatasetRegistry, unknown_name_suggests_and_lists_the_registered_ones) {
  EXPECT_TRUE(throwsWith<ValueError>(
      [] { findDataset("cifar"); },
      {"unknown dataset cifar", "did you mean cifar10?", "known: fashion_mnist, mnist"}));
  EXPECT_TRUE(
      throwsWith<ValueError>([] { findDataset("imagenet"); }, {"unknown dataset imagenet", "tokens"}));
}

TEST(DatasetRegistry, traits_and_defaults) {
  EXPECT_TRUE(findDataset("text").language);
  EXPECT_FALSE(findDataset("cifar10").language);
  EXPECT_EQ(findDataset("text").default_root, kFortunesDir);
  EXPECT_DOUBLE_EQ(findDataset("text").default_val_split, 0.1);
  EXPECT_FALSE(findDataset("tokens").root_hint.empty());
  EXPECT_EQ(findDataset("synthetic").keys,
            (std::vector<std::string>{"transforms", "size", "test_size", "num_classes", "input_shape"}));
  for (const std::string& name : datasetNames()) {
    const DatasetInfo& d = findDataset(name);
    EXPECT_TRUE(d.load) << name;
    if (d.language) {
      EXPECT_TRUE(d.keys.empty()) << name << " takes no image transforms";
    }
  }
}

TEST(DatasetRegistry, synthetic_loads_train_and_test_from_one_teacher) {
  DatasetOptions o;
  o.size = 10;
  o.test_size = 4;
  o.input_shape = {2, 3};
  o.num_classes = 3;
  o.seed = 5;
  DatasetSplits s = findDataset("synthetic").load(o);
  ASSERT_EQ(s.train->size(), 10);
  ASSERT_EQ(s.test->size(), 4);
  EXPECT_EQ(s.val, nullptr);
  EXPECT_EQ(s.train->get(0).input.shape(), (Shape{2, 3}));
  SyntheticDatasetOptions so;
  so.size = 14;
  so.input_shape = {2, 3};
  so.num_classes = 3;
  so.seed = 5;
  SyntheticDataset all(so);
  EXPECT_EQ(s.test->get(0).target.item<int64_t>(), all.get(10).target.item<int64_t>());
}

TEST(DatasetRegistry, text_loads_windows_with_its_validation_split_as_test_set) {
  TempDir dir;
  {
    std::ofstream f(dir.file("corpus.txt"));
    for (int i = 0; i < 50; ++i) f << "the quick brown fox jumps over the lazy dog\n";
  }
  DatasetOptions o;
  o.root = dir.file("corpus.txt");
  o.val_split = 0.1;
  o.block_size = 8;
  const DatasetInfo& text = findDataset("text");
  text.check_files(o);
  DatasetSplits s = text.load(o);
  EXPECT_EQ(s.vocab_size, 256);
  ASSERT_NE(s.val, nullptr);
  EXPECT_EQ(s.test, s.val);
  EXPECT_EQ(s.train->get(0).input.shape(), (Shape{8}));
  o.val_split = 0;
  EXPECT_TRUE(throwsWith<ValueError>([&] { text.load(o); }, {"has no validation tokens"}));
}

TEST(DatasetRegistry, check_files_names_what_is_missing) {
  DatasetOptions o;
  o.root = "/nonexistent/lockstep-data";
  EXPECT_THROW(findDataset("mnist").check_files(o), IoError);
  EXPECT_TRUE(
      throwsWith<IoError>([&] { findDataset("cifar10").check_files(o); }, {"/nonexistent/lockstep-data"}));
  EXPECT_THROW(findDataset("tokens").check_files(o), IoError);
  EXPECT_FALSE(findDataset("synthetic").check_files);
}

}  // namespace
}  // namespace lockstep::data
