// DeviceRoutedProcessGroup (auto on a host with GPUs) sends each op to the group for where its
// buffers live. Without a GPU: two host groups stand in, and the "device" one (gloo) shows that
// it got the op by refusing device memory.
#include "lockstep/comm/device_routed_process_group.h"

#include <gtest/gtest.h>

#include "comm/comm_test_util.h"
#include "lockstep/comm/init.h"
#include "lockstep/comm/store/hash_store.h"
#include "lockstep/comm/store/prefix_store.h"
#include "lockstep/util/error.h"

namespace lockstep::comm {
namespace {

using namespace std::chrono_literals;

TEST(DeviceRoutedProcessGroup, host_buffers_go_to_the_host_group_device_buffers_to_the_device_group) {
  auto store = std::make_shared<HashStore>();
  // The groups themselves, not the registry's (which, where a GPU is visible, take GPU buffers).
  auto host = testing::makeGroup("shm", std::make_shared<PrefixStore>("h", store), 0, 1);
  auto device = testing::makeGroup("gloo", std::make_shared<PrefixStore>("d", store), 0, 1);
  DeviceRoutedProcessGroup pg(host, device);
  EXPECT_EQ(pg.backendName(), "auto");
  EXPECT_EQ(pg.rank(), 0);
  EXPECT_EQ(pg.size(), 1);
  std::vector<float> x = {1, 2, 3};
  auto work = pg.allreduce(x.data(), x.size(), DType::f32);
  work->wait();
  EXPECT_NE(work->description().find("(shm, rank 0/1"), std::string::npos) << work->description();
  EXPECT_EQ(host->sequenceNumber(), 1u);
  EXPECT_EQ(device->sequenceNumber(), 0u);
  pg.barrier()->wait();
  EXPECT_EQ(host->sequenceNumber(), 2u);

  AllreduceOptions on_gpu;
  on_gpu.place.device = 0;
  try {
    pg.allreduce(x.data(), x.size(), DType::f32, on_gpu);
    ADD_FAILURE() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("backend gloo moves host memory only"), std::string::npos)
        << e.what();
  }
  BroadcastOptions b;
  b.place.device = 0;
  EXPECT_THROW(pg.broadcast(x.data(), x.size(), DType::f32, b), ValueError);
  EXPECT_EQ(host->sequenceNumber(), 2u);  // the host group never saw them
  // Subgroups are the host group's.
  auto sub = pg.newGroup({0});
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->backendName(), "shm");
  EXPECT_THROW(sub->allreduce(x.data(), x.size(), DType::f32, on_gpu), ValueError);
}

TEST(DeviceRoutedProcessGroup, its_timeout_applies_to_ops_that_use_the_group_default) {
  auto store = std::make_shared<HashStore>();
  auto host = testing::makeGroup("shm", std::make_shared<PrefixStore>("h", store), 0, 1, 7000ms);
  auto device = testing::makeGroup("gloo", std::make_shared<PrefixStore>("d", store), 0, 1, 7000ms);
  DeviceRoutedProcessGroup pg(host, device);
  EXPECT_EQ(pg.timeout(), 7000ms);
  std::vector<int32_t> x = {4, 5};
  pg.allreduce(x.data(), x.size(), DType::i32)->wait();
  EXPECT_EQ(x, (std::vector<int32_t>{4, 5}));
}

}  // namespace
}  // namespace lockstep::comm
