// DataLoader: identical batches for any num_workers, drop_last, epochs, resume, shutdown mid-epoch,
// worker exceptions, the gather fast path.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "data/data_test_util.h"
#include "lockstep/data.h"

namespace lockstep::data {
namespace {

using testing::throwsWith;

std::shared_ptr<Dataset> augmented(int64_t n) {
  auto base = std::make_shared<SyntheticDataset>(
      SyntheticDatasetOptions{.size = n, .input_shape = {3, 8, 8}, .seed = 3});
  return std::make_shared<TransformedDataset>(
      base,
      std::vector<std::shared_ptr<const Transform>>{
          std::make_shared<RandomCrop>(RandomCropOptions{.padding = 2}), std::make_shared<HorizontalFlip>()},
      TransformedDatasetOptions{.seed = 5});
}

struct Seen {
  std::vector<std::vector<int64_t>> indices;
  std::vector<std::vector<float>> inputs;
  std::vector<std::vector<int64_t>> targets;
  bool operator==(const Seen&) const = default;
};

Seen drain(DataLoader& loader) {
  Seen s;
  for (Batch& b : loader) {
    s.indices.push_back(b.indices);
    s.inputs.push_back(b.input.toVector<float>());
    s.targets.push_back(b.target.toVector<int64_t>());
  }
  return s;
}

// A dataset whose gather is slow and jittery (so workers finish out of order), optionally failing
// on one index, counting calls, and flagging get() use.
class Probe : public Dataset {
 public:
  explicit Probe(int64_t n, int64_t fail_at = -1)
      : inner_(std::make_shared<SyntheticDataset>(SyntheticDatasetOptions{.size = n})), fail_at_(fail_at) {}
  int64_t size() const override { return inner_->size(); }
  Example get(int64_t i) const override {
    ++gets;
    return inner_->get(i);
  }
  Batch gather(const std::vector<int64_t>& idx) const override {
    ++gathers;
    std::this_thread::sleep_for(std::chrono::microseconds(200 * ((idx[0] * 7) % 5)));
    for (int64_t i : idx) {
      if (i == fail_at_) throw IoError("disk.bin: bad sector under sample " + std::to_string(i));
    }
    return inner_->gather(idx);
  }
  mutable std::atomic<int64_t> gets{0}, gathers{0};

 private:
  std::shared_ptr<SyntheticDataset> inner_;
  int64_t fail_at_;
};

TEST(DataLoader, same_batches_for_any_num_workers) {
  auto ds = augmented(203);
  Seen ref;
  for (int64_t workers : {0, 1, 3}) {
    DataLoader loader(
        ds, {.batch_size = 16, .shuffle = true, .seed = 9, .num_workers = workers, .prefetch_factor = 2});
    loader.setEpoch(2);
    Seen s = drain(loader);
    ASSERT_EQ(s.indices.size(), 13u);
    EXPECT_EQ(s.indices.back().size(), 11u);  // 203 = 12 * 16 + 11
    if (workers == 0) {
      ref = s;
    } else {
      EXPECT_TRUE(s == ref) << "num_workers " << workers << " changed the batches";
    }
  }
  // And the order is the sampler's.
  const auto order = RandomSampler(203, 9).epochIndices(2);
  EXPECT_EQ(ref.indices[0], std::vector<int64_t>(order.begin(), order.begin() + 16));
}

TEST(DataLoader, slow_out_of_order_workers_still_deliver_in_order) {
  auto ds = std::make_shared<Probe>(120);
  DataLoader l0(ds, {.batch_size = 4, .shuffle = true, .num_workers = 0});
  DataLoader l3(ds, {.batch_size = 4, .shuffle = true, .num_workers = 3, .prefetch_factor = 1});
  EXPECT_TRUE(drain(l0) == drain(l3));
  EXPECT_EQ(ds->gets.load(), 0);  // the fast batched path was used, never per-sample get()
}

TEST(DataLoader, drop_last_and_sequential_order) {
  auto ds = std::make_shared<SyntheticDataset>(SyntheticDatasetOptions{.size = 10});
  DataLoader keep(ds, {.batch_size = 4});
  DataLoader drop(ds, {.batch_size = 4, .drop_last = true, .num_workers = 2});
  EXPECT_EQ(keep.size(), 3);
  EXPECT_EQ(drop.size(), 2);
  Seen k = drain(keep), d = drain(drop);
  ASSERT_EQ(k.indices.size(), 3u);
  ASSERT_EQ(d.indices.size(), 2u);
  EXPECT_EQ(k.indices[2], std::vector<int64_t>({8, 9}));
  EXPECT_EQ(d.indices[1], std::vector<int64_t>({4, 5, 6, 7}));
  // A second pass over the same epoch gives the same batches (as iterating a torch loader twice).
  EXPECT_TRUE(drain(keep) == k);
}

TEST(DataLoader, epochs_reshuffle_and_augment_differently) {
  auto ds = augmented(64);
  DataLoader loader(ds, {.batch_size = 8, .shuffle = true, .num_workers = 2});
  loader.setEpoch(0);
  Seen e0 = drain(loader);
  loader.setEpoch(1);
  Seen e1 = drain(loader);
  EXPECT_NE(e0.indices, e1.indices);
  loader.setEpoch(0);
  EXPECT_TRUE(drain(loader) == e0);
}

TEST(DataLoader, skip_and_load_state_resume_mid_epoch) {
  auto ds = augmented(50);
  DataLoader full(ds, {.batch_size = 6, .shuffle = true, .seed = 1, .num_workers = 2});
  full.setEpoch(3);
  Seen all = drain(full);
  ASSERT_EQ(all.indices.size(), 9u);

  // Consume 4 batches, checkpoint, and resume in a fresh loader.
  DataLoader first(ds, {.batch_size = 6, .shuffle = true, .seed = 1, .num_workers = 3});
  first.setEpoch(3);
  SamplerState saved;
  int seen = 0;
  for (Batch& b : first) {
    (void)b;
    if (++seen == 4) {
      saved = SamplerState::fromJson(first.state().toJson());
      break;
    }
  }
  EXPECT_EQ(saved, (SamplerState{3, 4}));
  DataLoader resumed(ds, {.batch_size = 6, .shuffle = true, .seed = 1, .num_workers = 1});
  resumed.loadState(saved);
  Seen rest = drain(resumed);
  ASSERT_EQ(rest.indices.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(rest.indices[i], all.indices[i + 4]);
    EXPECT_EQ(rest.inputs[i], all.inputs[i + 4]);
  }
  EXPECT_EQ(resumed.state(), (SamplerState{3, 9}));
  // skip(): the next pass starts there; later passes start from 0 again.
  resumed.skip(7);
  EXPECT_EQ(drain(resumed).indices.size(), 2u);
  EXPECT_EQ(drain(resumed).indices.size(), 9u);
  EXPECT_THROW(resumed.skip(10), ValueError);
}

TEST(DataLoader, destroyed_mid_epoch_stops_and_joins_workers) {
  auto ds = std::make_shared<Probe>(2000);
  for (int round = 0; round < 5; ++round) {
    auto loader = std::make_unique<DataLoader>(
        ds, DataLoaderOptions{.batch_size = 2, .num_workers = 3, .prefetch_factor = 2});
    int n = 0;
    for (Batch& b : *loader) {
      (void)b;
      if (++n == 3) break;
    }
    loader.reset();  // must not hang
  }
  // Bounded prefetch: at most 3 batches consumed + 6 ahead + 3 in flight per round were loaded.
  EXPECT_LE(ds->gathers.load(), 5 * (3 + 6 + 3));
  // Restarting and re-epoching mid-pass is equally clean.
  DataLoader loader(ds, {.batch_size = 2, .num_workers = 2});
  auto it = loader.begin();
  ++it;
  loader.setEpoch(1);
  EXPECT_EQ(drain(loader).indices.size(), 1000u);
}

TEST(DataLoader, worker_exception_is_rethrown_with_context_for_any_worker_count) {
  for (int64_t workers : {0, 1, 3}) {
    auto ds = std::make_shared<Probe>(40, /*fail_at=*/13);
    DataLoader loader(ds, {.batch_size = 4, .num_workers = workers});
    int delivered = 0;
    EXPECT_TRUE(throwsWith<IoError>(
        [&] {
          for (Batch& b : loader) {
            (void)b;
            ++delivered;
          }
        },
        {"DataLoader", "batch 3 of epoch 0", "13", "disk.bin: bad sector under sample 13"}))
        << "num_workers " << workers;
    EXPECT_EQ(delivered, 3) << "batches before the failing one are delivered, in order";
    // The loader is usable again afterwards (e.g. after skipping past the bad batch).
    loader.skip(4);
    EXPECT_EQ(drain(loader).indices.size(), 6u);
  }
}

TEST(DataLoader, distributed_sampler_shards_per_rank) {
  auto ds = std::make_shared<SyntheticDataset>(SyntheticDatasetOptions{.size = 45});
  std::vector<int64_t> all;
  for (int64_t rank = 0; rank < 4; ++rank) {
    auto sampler = std::make_shared<DistributedSampler>(
        45, DistributedSamplerOptions{.num_replicas = 4, .rank = rank, .seed = 2});
    DataLoader loader(ds, sampler, {.batch_size = 5, .num_workers = 1});
    loader.setEpoch(1);
    EXPECT_EQ(loader.size(), 3);  // 12 samples per rank
    for (Batch& b : loader) all.insert(all.end(), b.indices.begin(), b.indices.end());
  }
  EXPECT_EQ(all.size(), 48u);
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  EXPECT_EQ(all.size(), 45u);
  auto sampler = std::make_shared<SequentialSampler>(45);
  EXPECT_THROW(DataLoader(ds, sampler, {.shuffle = true}), ValueError);
  EXPECT_THROW(DataLoader(ds, {.batch_size = 0}), ValueError);
  EXPECT_THROW(DataLoader(ds, {.num_workers = -1}), ValueError);
}

TEST(DataLoader, empty_dataset_yields_no_batches) {
  auto ds = std::make_shared<SyntheticDataset>(SyntheticDatasetOptions{.size = 0});
  DataLoader loader(ds, {.batch_size = 3, .num_workers = 2});
  EXPECT_EQ(loader.size(), 0);
  EXPECT_TRUE(drain(loader).indices.empty());
}

}  // namespace
}  // namespace lockstep::data
