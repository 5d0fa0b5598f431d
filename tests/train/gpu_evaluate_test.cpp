// Evaluation on a GPU reduces its metrics there (the loss sum and the correct count, read once per
// pass) and gives the host's numbers: a classifier and a language model, each evaluated on the host
// and, moved, on cuda:0. Runs with ctest -L gpu; skips without a GPU.
#include <gtest/gtest.h>

#include <fstream>

#include "common/gpu.h"
#include "lockstep/nn.h"
#include "lockstep/train/train_data.h"

using namespace lockstep;

namespace {

// accuracy_slack: a language model's many positions may hold a near tie that the GPU's other
// rounding decides the other way; a classifier's few samples hold none.
void expectSameEvaluation(const std::string& model, nn::ModelOptions mo, const train::DataConfig& dc,
                          double accuracy_slack) {
  train::TrainData data = train::loadTrainData(dc, 1);
  if (dc.isLanguage()) mo.vocab_size = data.vocab_size;
  Generator g1(5), g2(5);
  mo.generator = &g1;
  auto host = nn::makeModel(model, mo);
  mo.generator = &g2;
  auto dev = nn::makeModel(model, mo);
  dev->to(Device::cuda(0));
  const auto& ds = data.val ? data.val : data.test;
  ASSERT_TRUE(ds);
  train::EvalResult h = train::evaluate(*host, ds, nullptr, 0, 1);
  train::EvalResult d = train::evaluate(*dev, ds, nullptr, 0, 1);
  EXPECT_GT(h.loss, 0.0) << model;
  EXPECT_NEAR(d.loss, h.loss, 1e-5 * h.loss) << model;
  EXPECT_NEAR(d.accuracy, h.accuracy, accuracy_slack) << model;
  EXPECT_TRUE(dev->parameters().front().tensor().isCuda());
}

}  // namespace

TEST(GpuEvaluate, a_classifier_scores_as_on_the_host) {
  LOCKSTEP_REQUIRE_GPU();
  train::DataConfig dc;
  dc.size = 64;
  dc.test_size = 1203;  // three batches of 500, the last partial
  dc.input_shape = {20};
  nn::ModelOptions mo;
  mo.in_features = 20;
  mo.out_features = 10;
  expectSameEvaluation("mlp", mo, dc, 0.0);
}

TEST(GpuEvaluate, a_language_model_scores_as_on_the_host) {
  LOCKSTEP_REQUIRE_GPU();
  const std::string dir = ::testing::TempDir();
  {
    std::ofstream text(dir + "/gpu_eval_corpus.txt");
    for (int i = 0; i < 300; ++i) text << "pack my box with five dozen liquor jugs " << i % 11 << ".\n";
  }
  train::DataConfig dc;
  dc.dataset = "text";
  dc.root = dir + "/gpu_eval_corpus.txt";
  dc.val_split = 0.1;
  dc.block_size = 32;
  nn::ModelOptions mo;
  mo.n_layer = 2;
  mo.n_head = 2;
  mo.n_embd = 32;
  mo.block_size = 32;
  expectSameEvaluation("gpt", mo, dc, 1e-3);
}
