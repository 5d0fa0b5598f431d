// Saving and restoring a whole single-process job: a run interrupted by a checkpoint and resumed
// in a fresh "process" (new objects) ends bitwise equal to an uninterrupted run.
#include "lockstep/train/checkpoint/training_state.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <numeric>

#include "lockstep/autograd.h"
#include "lockstep/data.h"
#include "lockstep/nn.h"
#include "lockstep/optim.h"
#include "lockstep/train/checkpoint/resume.h"

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
  TrainingParts parts() {
    return {model.get(), opt.get(), sched.get(), loader.get(), nullptr, {{"lr", 0.01}}};
  }
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

TEST(Checkpoint, resume_mid_epoch_is_bitwise_identical) {
  Job straight;
  straight.run(0, -1, 3);
  std::string dir = tempDir();
  {
    Job first;
    int64_t step = first.run(0, 13, 3);  // stop in the middle of epoch 1 (8 steps per epoch)
    saveCheckpoint(dir, captureTrainingState(first.parts(), step));
  }
  Job resumed;
  auto data = pickResumeCheckpoint({dir, "", true, RunIdentity{}}).data;
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

TEST(Checkpoint, model_load_lists_mismatches) {
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

namespace {

// A loader of rank `rank` in a world of `world` over 96 samples whose input is the sample's index.
std::unique_ptr<data::DataLoader> shardLoader(int64_t world, int64_t rank, int64_t batch) {
  Tensor x = Tensor::empty({96, 1});
  for (int i = 0; i < 96; ++i) x.data<float>()[i] = static_cast<float>(i);
  auto ds = std::make_shared<data::TensorDataset>(x, Tensor::zeros({96}, DType::i64));
  data::DistributedSamplerOptions so;
  so.num_replicas = world;
  so.rank = rank;
  so.seed = 5;
  data::DataLoaderOptions lo;
  lo.batch_size = batch;
  return std::make_unique<data::DataLoader>(ds, std::make_shared<data::DistributedSampler>(96, so), lo);
}

std::vector<int> drain(data::DataLoader& l, int64_t batches = -1) {
  std::vector<int> seen;
  for (data::Batch& b : l) {
    for (float v : b.input.toVector<float>()) seen.push_back(static_cast<int>(v));
    if (--batches == 0) break;
  }
  return seen;
}

}  // namespace

TEST(Checkpoint, resume_in_another_world_size_continues_after_the_consumed_samples) {
  auto model = nn::makeModel("mlp", {.in_features = 1, .out_features = 2, .hidden = {}});
  // A 2-rank job with batch 4 stops after 3 batches of epoch 1 on every rank: 24 samples consumed.
  std::vector<int> consumed;
  CheckpointData snap;
  for (int64_t r = 0; r < 2; ++r) {
    auto l = shardLoader(2, r, 4);
    l->setEpoch(1);
    for (int v : drain(*l, 3)) consumed.push_back(v);
    TrainingParts p{model.get(), nullptr, nullptr, l.get(), nullptr, {}, 2};
    if (r == 0) snap = captureTrainingState(p, 7);
  }
  // Resumed on 4 ranks with batch 3: 24 / (3 * 4) = batch 2 of epoch 1, and the ranks' remaining
  // batches are exactly the samples the first job had not reached.
  std::vector<int> rest;
  for (int64_t r = 0; r < 4; ++r) {
    auto l = shardLoader(4, r, 3);
    TrainingParts p{model.get(), nullptr, nullptr, l.get(), nullptr, {}, 4};
    std::string note = restoreTrainingState(snap, p);
    EXPECT_EQ(l->state().epoch, 1u);
    EXPECT_EQ(l->state().position, 2);
    EXPECT_NE(note.find("world size 2"), std::string::npos) << note;
    EXPECT_EQ(note.find("again"), std::string::npos) << note;
    for (int v : drain(*l)) rest.push_back(v);
  }
  std::vector<int> all = consumed;
  all.insert(all.end(), rest.begin(), rest.end());
  std::sort(all.begin(), all.end());
  std::vector<int> each(96);
  std::iota(each.begin(), each.end(), 0);
  EXPECT_EQ(all, each);  // every sample of the epoch exactly once

  // Batch 5 on 4 ranks: 24 / 20 rounds down to batch 1; 4 samples are seen again, none skipped.
  auto l = shardLoader(4, 0, 5);
  TrainingParts p{model.get(), nullptr, nullptr, l.get(), nullptr, {}, 4};
  std::string note = restoreTrainingState(snap, p);
  EXPECT_EQ(l->state().position, 1);
  EXPECT_NE(note.find("seeing 4 of the consumed samples again"), std::string::npos) << note;

  // The same world and batch size: the position as saved, no note.
  auto same = shardLoader(2, 1, 4);
  TrainingParts q{model.get(), nullptr, nullptr, same.get(), nullptr, {}, 2};
  EXPECT_EQ(restoreTrainingState(snap, q), "");
  EXPECT_EQ(same->state().position, 3);
}
