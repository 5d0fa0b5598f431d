// `lockstep data make-image-folder` then `lockstep train` on it with data.dataset image_folder: two
// ranks train, run.json names the classes, a corrupt file stops the run naming it unless
// data.skip_bad_files is set.
#include "train_cli.h"

namespace lockstep::test {
namespace {

constexpr const char* kFashionMnist = "/usr/share/datasets/fashion-mnist";

class TrainImageFolderCli : public TrainCli {
 protected:
  void SetUp() override {
    TrainCli::SetUp();
    if (!fs::exists(kFashionMnist))
      GTEST_SKIP() << kFashionMnist << " missing: apt install dataset-fashion-mnist";
    const Result made = runLockstep(dir_, "data make-image-folder -o " + dir_ +
                                              "/images --classes 4 --train-per-class 16 --val-per-class 8 "
                                              "--min-side 36 --max-side 48");
    ASSERT_EQ(made.code, 0) << made.output;
  }
  std::string config(const std::string& extra_data_keys) {
    return writeConfig("c.yaml",
                       "model: cifar_cnn\ndata: {dataset: image_folder, root: " + dir_ +
                           "/images, image_size: 32, resize_size: 36, num_workers: 2" + extra_data_keys +
                           "}\ntrain_micro_batch_size_per_gpu: 8\noptimizer: {type: Adam, params: {lr: "
                           "1.0e-3}}\nepochs: 1\nseed: 1\n");
  }
};

TEST_F(TrainImageFolderCli, two_ranks_train_and_run_json_holds_class_to_idx) {
  const Result r = run(config("") + " --nproc-per-node 2 --output-dir " + dir_ + "/run");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string run_json = readFile(dir_ + "/run/run.json");
  // torchvision's class_to_idx: the sorted class folder names.
  for (const char* entry : {"\"Dress\": 0", "\"Pullover\": 1", "\"T-shirt_top\": 2", "\"Trouser\": 3"})
    EXPECT_NE(run_json.find(entry), std::string::npos) << entry << " in " << run_json;
}

TEST_F(TrainImageFolderCli, a_corrupt_file_stops_the_run_naming_it_unless_skipped) {
  const std::string bad = dir_ + "/images/train/Dress/broken.jpg";
  std::ofstream(bad) << "\xff\xd8\xff but not a JPEG";
  Result r = run(config("") + " --output-dir " + dir_ + "/strict");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find(bad), std::string::npos) << r.output;
  r = run(config(", skip_bad_files: true") + " --output-dir " + dir_ + "/lenient");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("skipping " + bad), std::string::npos) << r.output;
}

// More class folders than the model has outputs: refused before the first step, naming the count and
// the key to set (the cross entropy's "target out of range" at the first step before).
TEST_F(TrainImageFolderCli, more_classes_than_the_model_outputs_are_refused_naming_num_classes) {
  const std::string c = writeConfig(
      "few.yaml",
      "model: {name: cifar_cnn, num_classes: 3}\ndata: {dataset: image_folder, root: " + dir_ +
          "/images, image_size: 32, resize_size: 36}\ntrain_micro_batch_size_per_gpu: 8\nmax_steps: 2\n");
  const Result r = run(c + " --output-dir " + dir_ + "/few");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("holds 4 classes but the model cifar_cnn outputs 3; set model.num_classes: 4"),
            std::string::npos)
      << r.output;
  // Image lists (bare labels): their largest label counts, before the first step too (it failed in
  // the cross entropy at the first step, or after a whole epoch for a label in val_list only).
  std::string first;
  for (const auto& e : fs::directory_iterator(dir_ + "/images/train/Dress")) {
    first = e.path().string();
    break;
  }
  std::ofstream(dir_ + "/images/train.txt") << first << " 0\n" << first << " 1\n";
  std::ofstream(dir_ + "/images/val.txt") << first << " 0\n" << first << " 5\n";
  const Result lists = run(c + " --output-dir " + dir_ + "/lists --set data.train_list=train.txt --set " +
                           "data.val_list=val.txt");
  EXPECT_EQ(lists.code, 2) << lists.output;
  EXPECT_NE(lists.output.find("hold labels up to 5, 6 classes but the model cifar_cnn outputs 3; set "
                              "model.num_classes: 6"),
            std::string::npos)
      << lists.output;
}

// bf16 images (data.transforms.to_dtype) in a bf16 run: the loader's batches are bf16 and the run
// trains on them (on a GPU they cross PCIe at half the bytes).
TEST_F(TrainImageFolderCli, bf16_images_train_a_bf16_run) {
  const std::string c =
      writeConfig("bf16.yaml", "model: cifar_cnn\ndata: {dataset: image_folder, root: " + dir_ +
                                   "/images, image_size: 32, resize_size: 36, transforms: "
                                   "{to_dtype: bfloat16}}\nbf16: {enabled: true}\n"
                                   "train_micro_batch_size_per_gpu: 8\nmax_steps: 4\nseed: 1\n");
  const Result r = run(c + " --output-dir " + dir_ + "/bf16");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(readFile(dir_ + "/bf16/summary.json").find("\"precision\": \"bf16\""), std::string::npos);
}

}  // namespace
}  // namespace lockstep::test
