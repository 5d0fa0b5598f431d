// Mixed precision through `lockstep train`: the DeepSpeed fp16 / bf16 sections, the loss scale and
// skipped steps in every output, the scaler's state in checkpoints (bitwise resume), and the seed
// CNN's accuracy on Fashion-MNIST in bf16 and fp16.
#include <nlohmann/json.hpp>

#include "train/train_cli.h"

using namespace lockstep::test;

namespace {
// The scale doubles every 3 clean steps, so a resume that lost the scaler's state would scale
// (and round) differently from the uninterrupted run.
const std::string kFp16 = std::string(kSynthetic) + R"(
fp16: {enabled: true, loss_scale: 0, initial_scale_power: 8, loss_scale_window: 3, hysteresis: 2, min_loss_scale: 1}
)";

nlohmann::json summaryOf(const std::string& dir) {
  return nlohmann::json::parse(readFile(dir + "/summary.json"));
}

std::string tensorboardEvents(const std::string& dir) {
  std::string all;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.path().filename().string().rfind("events.out.tfevents", 0) == 0) all += readFile(e.path().string());
  }
  return all;
}
}  // namespace

TEST_F(TrainCli, fp16_reports_the_loss_scale_and_resumes_bitwise_with_it) {
  std::string cfg = writeConfig("c.yaml", kFp16);
  Result straight = run(cfg + " --output-dir " + dir_ + "/straight");
  ASSERT_EQ(straight.code, 0) << straight.output;
  nlohmann::json s = summaryOf(dir_ + "/straight");
  EXPECT_EQ(s["precision"], "fp16");
  EXPECT_NE(s["precision_path"].get<std::string>().find("f16"), std::string::npos) << s;
  ASSERT_TRUE(s.contains("loss_scale") && s.contains("skipped_steps")) << s;
  EXPECT_GT(s["loss_scale"].get<double>(), 256.0) << "20 clean steps with a window of 3 grow the scale";
  EXPECT_NE(straight.output.find("loss_scale"), std::string::npos) << straight.output;
  std::string csv = readFile(dir_ + "/straight/metrics.csv");
  EXPECT_NE(csv.find(",3,train/loss_scale,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",3,train/skipped_steps,"), std::string::npos) << csv;
  EXPECT_NE(tensorboardEvents(dir_ + "/straight").find("train/loss_scale"), std::string::npos);

  Result first = run(cfg + " --output-dir " + dir_ + "/r --set max_steps=9");
  ASSERT_EQ(first.code, 0) << first.output;
  Result second = run(cfg + " --output-dir " + dir_ + "/r --resume");
  ASSERT_EQ(second.code, 0) << second.output;
  EXPECT_EQ(summaryOf(dir_ + "/r")["loss_scale"], s["loss_scale"]);
  EXPECT_EQ(readFile(dir_ + "/straight/model.safetensors"), readFile(dir_ + "/r/model.safetensors"));
}

TEST_F(TrainCli, bf16_trains_without_a_loss_scale) {
  std::string cfg = writeConfig("c.yaml", std::string(kSynthetic) + "bf16: {enabled: true}\n");
  Result r = run(cfg + " --output-dir " + dir_ + "/o");
  ASSERT_EQ(r.code, 0) << r.output;
  nlohmann::json s = summaryOf(dir_ + "/o");
  EXPECT_EQ(s["precision"], "bf16");
  EXPECT_FALSE(s.contains("loss_scale")) << s;
  EXPECT_EQ(readFile(dir_ + "/o/metrics.csv").find("loss_scale"), std::string::npos);
}

// The issue's bar: the seed CNN reaches >= 90% test accuracy on Fashion-MNIST in 5 epochs in bf16
// and in fp16 (f32 reaches 90.4% with the same settings). Two ranks of 16 samples: the global
// batch of 32 of the single-process seed.
class FashionMnistPrecision : public TrainCli, public ::testing::WithParamInterface<const char*> {};

TEST_P(FashionMnistPrecision, seed_cnn_reaches_90_percent_in_5_epochs) {
  const std::string precision = GetParam();
  const std::string data = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(data)) GTEST_SKIP() << "Fashion-MNIST is not installed at " << data;
  std::string cfg = writeConfig("fm.yaml", R"(
model: mnist_cnn
data: {dataset: fashion_mnist, root: /usr/share/datasets/fashion-mnist, val_split: 0.0, num_workers: 1,
       transforms: {normalize: {mean: 0.2860, std: 0.3530}}}
train_micro_batch_size_per_gpu: 16
optimizer: {type: Adam, params: {lr: 1.0e-3}}
epochs: 5
seed: 1
steps_per_print: 500
eval: {every_epochs: 5}
)");
  Result r =
      run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/o --set " + precision + ".enabled=true");
  ASSERT_EQ(r.code, 0) << r.output;
  nlohmann::json s = summaryOf(dir_ + "/o");
  std::printf("[ %s ] test_accuracy %.4f, %.0f samples/s, %s\n", precision.c_str(),
              s["test_accuracy"].get<double>(), s["samples_per_second"].get<double>(),
              s["precision_path"].get<std::string>().c_str());
  EXPECT_EQ(s["precision"], precision);
  EXPECT_GE(s["test_accuracy"].get<double>(), 0.90) << s;
}

INSTANTIATE_TEST_SUITE_P(Train, FashionMnistPrecision, ::testing::Values("bf16", "fp16"));
