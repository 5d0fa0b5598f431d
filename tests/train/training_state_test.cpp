// Saving and restoring a whole single-process job: a run interrupted by a checkpoint and resumed
// in a fresh "process" (new objects) ends bitwise equal to an uninterrupted run.
#include <gtest/gtest.h>

#include <filesystem>

#include "lockstep/autograd.h"
#include "lockstep/data.h"
#include "lockstep/nn.h"
#include "lockstep/optim.h"
#include "lockstep/train/training_state.h"

using namespace lockstep;
using namespace lockstep::train;
namespace fs = std::filesystem;

namespace {

struct Job {
  std::shared_ptr<data::TensorDataset> ds;
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<optim::Adam> opt;
  std::unique_ptr<optim::StepLR> sched;
  std::unique_ptr<data::DataLoader> loader;
  Job() {
    Tensor x = Tensor::empty({64, 5});
    Generator(1).uniform(x, -1, 1);
    Tensor y = Tensor::empty({64}, DType::i64);
    for (int i = 0; i < 64; ++i) y.data<int64_t>()[i] = i % 3;
    ds = std::make_shared<data::TensorDataset>(x, y);
    Generator g(3);
    nn::ModelOptions mo;
    mo.in_features = 5;
    mo.out_features = 3;
    mo.hidden = {6};
    mo.generator = &g;
    model = nn::makeModel("mlp", mo);
    opt = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 0.01});
    sched = std::make_unique<optim::StepLR>(*opt, optim::StepLROptions{.step_size = 3, .gamma = 0.5});
    data::DataLoaderOptions lo;
    lo.batch_size = 8;
    loader = std::make_unique<data::DataLoader>(ds, std::make_shared<data::RandomSampler>(64, 9), lo);
  }
  TrainingParts parts() { return {model.get(), opt.get(), sched.get(), loader.get(), nullptr, {{"lr", 0.01}}}; }
  // Trains until `stop` global steps (or to the end of `epochs`), starting from the loader's state.
  int64_t run(int64_t step, int64_t stop, int epochs) {
    for (uint64_t e = loader->epoch(); e < static_cast<uint64_t>(epochs); ++e) {
      if (loader->state().position == 0) loader->setEpoch(e);
      for (data::Batch& b : *loader) {
        opt->zeroGrad();
        autograd::crossEntropy(model->forward(autograd::Variable(b.input)), b.target).backward();
        opt->step();
        if (++step == stop) return step;
      }
      sched->step();
      loader->setEpoch(e + 1);
    }
    return step;
  }
};

std::string tempDir() {
  std::string t = (fs::temp_directory_path() / "lockstep-ts-XXXXXX").string();
  return ::mkdtemp(t.data());
}

}  // namespace

TEST(checkpoint, resume_mid_epoch_is_bitwise_identical) {
  Job straight;
  straight.run(0, -1, 3);
  std::string dir = tempDir();
  {
    Job first;
    int64_t step = first.run(0, 13, 3);  // stop in the middle of epoch 1 (8 steps per epoch)
    saveCheckpoint(dir, captureTrainingState(first.parts(), step));
  }
  Job resumed;
  auto data = loadLatestCheckpoint(dir);
  ASSERT_TRUE(data.has_value());
  TrainingParts p = resumed.parts();
  restoreTrainingState(*data, p);
  EXPECT_EQ(resumed.loader->state().epoch, 1u);
  EXPECT_EQ(resumed.loader->state().position, 5);
  resumed.run(data->step, -1, 3);
  auto a = straight.model->namedParameters(), b = resumed.model->namedParameters();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].second.tensor().toVector<float>(), b[i].second.tensor().toVector<float>()) << a[i].first;
  }
  fs::remove_all(dir);
}

TEST(checkpoint, model_load_lists_mismatches) {
  std::string dir = tempDir();
  Job j;
  saveModel(dir + "/m.safetensors", *j.model);
  auto other = nn::makeModel("mlp", {.in_features = 5, .out_features = 4, .hidden = {6}});
  try {
    loadModel(dir + "/m.safetensors", *other);
    FAIL() << "expected a mismatch error";
  } catch (const ValueError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[4, 6]"), std::string::npos) << msg;
  }
  Job k;
  EXPECT_NO_THROW(loadModel(dir + "/m.safetensors", *k.model));
  fs::remove_all(dir);
}
