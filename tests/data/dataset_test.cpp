// TensorDataset (and its gather fast path), Subset/randomSplit, synthetic datasets, transforms.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "lockstep/data.h"

namespace lockstep::data {
namespace {

std::shared_ptr<TensorDataset> rowsDataset(int64_t n, Shape sample = {2, 3}) {
  Shape shape = sample;
  shape.insert(shape.begin(), n);
  Tensor x = Tensor::empty(shape, DType::f32);
  float* p = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) p[i] = static_cast<float>(i);
  Tensor y = Tensor::empty({n}, DType::i64);
  for (int64_t i = 0; i < n; ++i) y.data<int64_t>()[i] = i % 10;
  return std::make_shared<TensorDataset>(x, y);
}

// Forces the generic per-sample path of Dataset::gather.
class SlowPath : public Dataset {
 public:
  explicit SlowPath(std::shared_ptr<Dataset> base) : base_(std::move(base)) {}
  int64_t size() const override { return base_->size(); }
  Example get(int64_t i) const override { return base_->get(i); }

 private:
  std::shared_ptr<Dataset> base_;
};

TEST(TensorDataset, get_and_gather) {
  auto ds = rowsDataset(5);
  EXPECT_EQ(ds->size(), 5);
  Example e = ds->get(3);
  EXPECT_EQ(e.input.shape(), Shape({2, 3}));
  EXPECT_EQ(e.target.dim(), 0);
  EXPECT_EQ(e.target.item<int64_t>(), 3);
  EXPECT_FLOAT_EQ(e.input.toVector<float>()[0], 18.0f);
  e.input.fill(-1);  // the caller's copy
  EXPECT_FLOAT_EQ(ds->get(3).input.toVector<float>()[0], 18.0f);

  Batch b = ds->gather({4, 0, 4});
  EXPECT_EQ(b.input.shape(), Shape({3, 2, 3}));
  EXPECT_EQ(b.target.toVector<int64_t>(), std::vector<int64_t>({4, 0, 4}));
  EXPECT_EQ(b.indices, std::vector<int64_t>({4, 0, 4}));
  EXPECT_FLOAT_EQ(b.input.toVector<float>()[6], 0.0f);
  EXPECT_THROW(ds->gather({5}), ValueError);
  EXPECT_THROW(ds->get(-1), ValueError);
  EXPECT_THROW(TensorDataset(Tensor::zeros({3, 2}), Tensor::zeros({4}, DType::i64)), ValueError);
}

TEST(TensorDataset, fast_gather_matches_the_generic_stack) {
  auto ds = rowsDataset(9, {1, 4, 4});
  SlowPath slow(ds);
  const std::vector<int64_t> idx = {8, 1, 1, 5};
  Batch fast = ds->gather(idx), generic = slow.gather(idx);
  EXPECT_EQ(fast.input.toVector<float>(), generic.input.toVector<float>());
  EXPECT_EQ(fast.input.shape(), generic.input.shape());
  EXPECT_EQ(fast.target.toVector<int64_t>(), generic.target.toVector<int64_t>());
  EXPECT_EQ(generic.target.shape(), Shape({4}));
}

TEST(RandomSplit, sizes_disjoint_cover_and_deterministic) {
  auto ds = rowsDataset(100);
  auto parts = randomSplit(ds, {80, 20}, 42);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0]->size(), 80);
  EXPECT_EQ(parts[1]->size(), 20);
  std::set<int64_t> seen;
  for (const auto& p : parts) seen.insert(p->indices().begin(), p->indices().end());
  EXPECT_EQ(seen.size(), 100u);
  EXPECT_EQ(randomSplit(ds, {80, 20}, 42)[1]->indices(), parts[1]->indices());
  EXPECT_NE(randomSplit(ds, {80, 20}, 43)[1]->indices(), parts[1]->indices());
  // A subset reads through to the base, through the fast path, and reports its own indices.
  const int64_t base_i = parts[1]->indices()[3];
  Batch b = parts[1]->gather({3});
  EXPECT_EQ(b.indices, std::vector<int64_t>({3}));
  EXPECT_EQ(b.input.toVector<float>(), ds->gather({base_i}).input.toVector<float>());
  EXPECT_EQ(parts[1]->get(3).target.item<int64_t>(), base_i % 10);
  EXPECT_THROW(randomSplit(ds, {80, 21}, 0), ValueError);
  EXPECT_THROW(Subset(ds, {100}), ValueError);
}

TEST(RandomSplit, mnist_sized_split) {
  auto ds = std::make_shared<SyntheticDataset>(SyntheticDatasetOptions{.size = 60000, .input_shape = {1}});
  auto parts = randomSplit(ds, {48000, 12000}, 0);
  EXPECT_EQ(parts[0]->size(), 48000);
  EXPECT_EQ(parts[1]->size(), 12000);
  std::vector<int64_t> all = parts[0]->indices();
  all.insert(all.end(), parts[1]->indices().begin(), parts[1]->indices().end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::unique(all.begin(), all.end()), all.end());
  EXPECT_EQ(all.size(), 60000u);
}

TEST(SyntheticDataset, deterministic_learnable_and_independent_of_size) {
  SyntheticDataset a({.size = 500, .input_shape = {20}, .num_classes = 4, .seed = 1});
  SyntheticDataset b({.size = 100, .input_shape = {20}, .num_classes = 4, .seed = 1});
  SyntheticDataset c({.size = 100, .input_shape = {20}, .num_classes = 4, .seed = 2});
  EXPECT_EQ(a.inputs().slice(0, 100).toVector<float>(), b.inputs().toVector<float>());
  EXPECT_EQ(a.targets().slice(0, 100).toVector<int64_t>(), b.targets().toVector<int64_t>());
  EXPECT_NE(b.inputs().toVector<float>(), c.inputs().toVector<float>());
  // Labels are the teacher's argmax, and every class occurs.
  std::vector<int> counts(4, 0);
  for (int64_t y : a.targets().toVector<int64_t>()) ++counts[y];
  for (int cnt : counts) EXPECT_GT(cnt, 50);
  EXPECT_EQ(a.teacher().shape(), Shape({4, 20}));
  SyntheticDataset img({.size = 3, .input_shape = {1, 28, 28}});
  EXPECT_EQ(img.inputs().shape(), Shape({3, 1, 28, 28}));
  EXPECT_THROW(SyntheticDataset({.num_classes = 1}), ValueError);
}

TEST(SyntheticRegressionDataset, teacher_plus_noise) {
  SyntheticRegressionDataset ds({.noise_std = 0.0, .seed = 4});
  EXPECT_EQ(ds.size(), 2048);
  EXPECT_EQ(ds.inputs().shape(), Shape({2048, 20}));
  EXPECT_EQ(ds.targets().shape(), Shape({2048, 1}));
  auto x = ds.inputs().toVector<float>();
  EXPECT_TRUE(std::all_of(x.begin(), x.end(), [](float v) { return v >= 0.0f && v < 1.0f; }));
  auto w = ds.weight().toVector<float>();
  double y7 = ds.bias().toVector<float>()[0];
  for (int k = 0; k < 20; ++k) y7 += static_cast<double>(w[k]) * x[7 * 20 + k];
  EXPECT_NEAR(ds.targets().toVector<float>()[7], y7, 1e-5);
  Batch b = ds.gather({7, 8});
  EXPECT_EQ(b.target.shape(), Shape({2, 1}));
}

TEST(Transforms, normalize_per_channel) {
  Tensor x = Tensor::fromVector<float>({1, 2, 3, 4}, {2, 2});
  Normalize n({.mean = {1, 2}, .std = {2, 0.5}});
  n.apply(x, {});
  EXPECT_EQ(x.toVector<float>(), std::vector<float>({0, 0.5, 2, 4}));
  Tensor bad = Tensor::zeros({3, 2});
  EXPECT_THROW(n.apply(bad, {}), ValueError);
  EXPECT_THROW(Normalize({.mean = {0}, .std = {0}}), ValueError);
}

TEST(Transforms, flip_and_crop_are_functions_of_epoch_and_index) {
  Tensor img = Tensor::empty({1, 4, 4});
  for (int i = 0; i < 16; ++i) img.data<float>()[i] = static_cast<float>(i + 1);
  HorizontalFlip always({.p = 1.0});
  Tensor f = img.clone();
  always.apply(f, {});
  EXPECT_EQ(f.toVector<float>()[0], 4.0f);
  EXPECT_EQ(f.toVector<float>()[3], 1.0f);

  RandomCrop crop({.padding = 2, .fill = {0.0f}});
  int changed = 0, flips = 0;
  HorizontalFlip half;
  for (int64_t i = 0; i < 200; ++i) {
    TransformContext ctx{.seed = 1, .epoch = 0, .index = i};
    Tensor a = img.clone(), b = img.clone();
    crop.apply(a, ctx);
    crop.apply(b, ctx);
    EXPECT_EQ(a.toVector<float>(), b.toVector<float>());  // same (seed, epoch, index): same crop
    if (a.toVector<float>() != img.toVector<float>()) ++changed;
    // Crop content is a shifted copy padded with the fill: the sum never grows.
    auto v = a.toVector<float>();
    EXPECT_LE(std::accumulate(v.begin(), v.end(), 0.0), 136.0);
    Tensor c = img.clone();
    half.apply(c, ctx);
    if (c.toVector<float>()[0] == 4.0f) ++flips;
  }
  EXPECT_GT(changed, 150);  // 24 of 25 offsets move the window
  EXPECT_NEAR(flips, 100, 30);
  // Another epoch draws differently.
  int same = 0;
  for (int64_t i = 0; i < 50; ++i) {
    Tensor a = img.clone(), b = img.clone();
    crop.apply(a, {.seed = 1, .epoch = 0, .index = i});
    crop.apply(b, {.seed = 1, .epoch = 1, .index = i});
    same += a.toVector<float>() == b.toVector<float>();
  }
  EXPECT_LT(same, 15);
  Tensor flat = Tensor::zeros({16});
  EXPECT_THROW(crop.apply(flat, {}), ValueError);
}

// RandomCrop's padding takes one fill per channel (the normalised value of black, as torchvision pads
// before Normalize), or one for all; a count that fits neither is an error.
TEST(Transforms, crop_fills_each_channel_with_its_own_value) {
  Tensor img = Tensor::full({3, 4, 4}, 9.0f);
  RandomCrop crop({.padding = 2, .fill = {-1.0f, -2.0f, -3.0f}});
  int padded = 0;
  for (int64_t i = 0; i < 20; ++i) {
    Tensor a = img.clone();
    crop.apply(a, {.seed = 2, .epoch = 0, .index = i});
    const std::vector<float> v = a.toVector<float>();
    for (int64_t c = 0; c < 3; ++c) {
      for (int64_t k = 0; k < 16; ++k) {
        const float x = v[static_cast<size_t>(c * 16 + k)];
        EXPECT_TRUE(x == 9.0f || x == -1.0f - static_cast<float>(c)) << c << " " << x;
        padded += x != 9.0f;
      }
    }
  }
  EXPECT_GT(padded, 0);
  Tensor two = Tensor::full({2, 4, 4}, 9.0f);
  EXPECT_THROW(crop.apply(two, {.seed = 2, .epoch = 0, .index = 0}), ValueError);
  EXPECT_THROW(RandomCrop({.padding = 2, .fill = {}}), ValueError);
}

TEST(Transforms, transformed_dataset_gather_equals_per_sample_get) {
  auto base =
      std::make_shared<SyntheticDataset>(SyntheticDatasetOptions{.size = 20, .input_shape = {3, 8, 8}});
  TransformedDataset ds(
      base,
      {std::make_shared<RandomCrop>(RandomCropOptions{.padding = 2}), std::make_shared<HorizontalFlip>(),
       std::make_shared<Normalize>(NormalizeOptions{.mean = {0, 0, 0}, .std = {2, 2, 2}})},
      {.seed = 11});
  ds.setEpoch(3);
  const std::vector<int64_t> idx = {5, 0, 19, 5};
  Batch b = ds.gather(idx);
  for (size_t r = 0; r < idx.size(); ++r) {
    EXPECT_EQ(b.input.select(static_cast<int64_t>(r)).toVector<float>(),
              ds.get(idx[r]).input.toVector<float>());
  }
  // The base is untouched.
  EXPECT_EQ(base->gather({5}).input.toVector<float>(), base->get(5).input.toVector<float>());
  Batch other = ds.gather(idx);
  EXPECT_EQ(other.input.toVector<float>(), b.input.toVector<float>());
  ds.setEpoch(4);
  EXPECT_NE(ds.gather(idx).input.toVector<float>(), b.input.toVector<float>());
}

}  // namespace
}  // namespace lockstep::data
