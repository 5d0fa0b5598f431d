// DataLoader::waitSeconds(): the time the iterating thread waited for batches, what the trainer
// reports as its data wait; and the device option's refusal where it cannot work.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "lockstep/data.h"

namespace lockstep::data {
namespace {

// Each batch takes `delay` to load.
class Slow : public Dataset {
 public:
  Slow(int64_t n, std::chrono::milliseconds delay)
      : inner_(std::make_shared<SyntheticDataset>(SyntheticDatasetOptions{.size = n})), delay_(delay) {}
  int64_t size() const override { return inner_->size(); }
  Example get(int64_t i) const override { return inner_->get(i); }
  Batch gather(const std::vector<int64_t>& idx) const override {
    std::this_thread::sleep_for(delay_);
    return inner_->gather(idx);
  }

 private:
  std::shared_ptr<SyntheticDataset> inner_;
  std::chrono::milliseconds delay_;
};

double seconds(std::chrono::milliseconds ms) { return std::chrono::duration<double>(ms).count(); }

TEST(DataLoaderWait, a_loop_faster_than_loading_waits_for_every_batch) {
  const auto delay = std::chrono::milliseconds(20);
  DataLoader loader(std::make_shared<Slow>(16, delay), {.batch_size = 2, .num_workers = 1});
  EXPECT_EQ(loader.waitSeconds(), 0);
  int64_t n = 0;
  for (Batch& b : loader) n += b.size();
  EXPECT_EQ(n, 16);
  // 8 batches loaded one after another by one worker while the loop does nothing.
  EXPECT_GE(loader.waitSeconds(), 8 * seconds(delay) * 0.9);
  // Cumulative over passes.
  const double first = loader.waitSeconds();
  for (Batch& b : loader) (void)b;
  EXPECT_GE(loader.waitSeconds(), first + 8 * seconds(delay) * 0.9);
}

TEST(DataLoaderWait, a_loop_slower_than_loading_barely_waits) {
  const auto delay = std::chrono::milliseconds(20), step = std::chrono::milliseconds(40);
  DataLoader loader(std::make_shared<Slow>(16, delay), {.batch_size = 2, .num_workers = 2});
  for (Batch& b : loader) {
    (void)b;
    std::this_thread::sleep_for(step);  // the "training step": the workers load ahead meanwhile
  }
  // The first batch is waited for, the others were loaded during the steps: far less than the
  // 8 * 20 ms a loop that loads its own batches waits.
  EXPECT_LT(loader.waitSeconds(), 8 * seconds(delay) / 2);
}

TEST(DataLoaderWait, a_gpu_device_without_cuda_is_refused_by_name) {
  if (builtWithCuda()) GTEST_SKIP() << "built with CUDA: gpu_data_loader_test covers cuda devices";
  try {
    DataLoader loader(std::make_shared<Slow>(4, std::chrono::milliseconds(0)),
                      {.batch_size = 2, .device = Device::cuda(0)});
    FAIL() << "no error";
  } catch (const NotSupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0 needs CUDA"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lockstep::data
