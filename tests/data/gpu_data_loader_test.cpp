// DataLoader with device cuda:0: batches are pinned by the workers and copied to the GPU a batch
// ahead on a side stream; what arrives equals the host batches, in order, across passes, after a
// pass left early, and while the caller's stream runs work on the previous batch.
#include <gtest/gtest.h>

#include "common/gpu.h"
#include "lockstep/data.h"

namespace lockstep::data {
namespace {

std::shared_ptr<Dataset> dataset() {
  return std::make_shared<SyntheticDataset>(
      SyntheticDatasetOptions{.size = 40, .input_shape = {3, 8, 8}, .seed = 2});
}

std::vector<std::pair<std::vector<float>, std::vector<int64_t>>> drain(DataLoader& loader, bool on_gpu) {
  std::vector<std::pair<std::vector<float>, std::vector<int64_t>>> out;
  for (Batch& b : loader) {
    EXPECT_EQ(b.input.isCuda(), on_gpu);
    EXPECT_EQ(b.target.isCuda(), on_gpu);
    // Work on the caller's stream that uses the batch, as a training step would.
    Tensor copy = b.input.clone();
    out.emplace_back(b.input.toVector<float>(), b.target.toVector<int64_t>());
    EXPECT_EQ(copy.toVector<float>(), out.back().first);
  }
  return out;
}

TEST(GpuDataLoader, batches_arrive_on_the_gpu_equal_to_the_host_ones) {
  LOCKSTEP_REQUIRE_GPU();
  for (int64_t workers : {0, 2}) {
    SCOPED_TRACE(workers);
    DataLoader host(dataset(), {.batch_size = 6, .shuffle = true, .seed = 4, .num_workers = workers});
    DataLoader gpu(
        dataset(),
        {.batch_size = 6, .shuffle = true, .seed = 4, .num_workers = workers, .device = Device::cuda(0)});
    for (uint64_t epoch = 0; epoch < 2; ++epoch) {
      host.setEpoch(epoch);
      gpu.setEpoch(epoch);
      EXPECT_EQ(drain(gpu, true), drain(host, false));
    }
    // A pass left early, then a fresh one: the batch staged ahead is not handed out again.
    auto it = gpu.begin();
    ++it;
    gpu.setEpoch(3);
    host.setEpoch(3);
    EXPECT_EQ(drain(gpu, true), drain(host, false));
  }
}

}  // namespace
}  // namespace lockstep::data
