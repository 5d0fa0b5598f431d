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

TEST(DeviceRoutedProcessGroup, subgroups_route_device_buffers_to_a_staging_group_of_their_own) {
  // As the registry's groups where a GPU is visible (a pipeline's stage and replica groups): a
  // subgroup's GPU buffers go to a group made of a second host subgroup (HostStagedProcessGroup
  // there; here that host subgroup itself, shm, which shows it got the op by refusing device memory).
  auto store = std::make_shared<HashStore>();
  auto host = testing::makeGroup("shm", std::make_shared<PrefixStore>("h", store), 0, 1);
  DevicePathOptions paths;
  paths.name = "shm";
  paths.shared_gpus = [store] {
    return testing::makeGroup("gloo", std::make_shared<PrefixStore>("d", store), 0, 1);
  };
  std::vector<std::shared_ptr<ProcessGroup>> staging;
  paths.subgroup_gpus = [&staging](std::shared_ptr<ProcessGroup> h) {
    staging.push_back(h);
    return h;
  };
  DeviceRoutedProcessGroup pg(host, paths);
  auto sub = pg.newGroup({0});
  auto* routed = dynamic_cast<DeviceRoutedProcessGroup*>(sub.get());
  ASSERT_NE(routed, nullptr);
  EXPECT_EQ(sub->backendName(), "shm");
  ASSERT_EQ(staging.size(), 1u);
  EXPECT_NE(staging[0].get(), &routed->hostGroup());
  std::vector<float> x = {1, 2};
  sub->allreduce(x.data(), x.size(), DType::f32)->wait();
  EXPECT_EQ(routed->hostGroup().sequenceNumber(), 1u);
  EXPECT_EQ(staging[0]->sequenceNumber(), 0u);
  AllreduceOptions on_gpu;
  on_gpu.place.device = 0;
  try {
    sub->allreduce(x.data(), x.size(), DType::f32, on_gpu);
    ADD_FAILURE() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("backend shm moves host memory only"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(routed->deviceGroup(), staging[0].get());
  EXPECT_EQ(routed->hostGroup().sequenceNumber(), 1u);
  EXPECT_EQ(pg.deviceGroup(), nullptr);  // the parent's own GPU path is still unchosen
  // A subgroup of the subgroup routes the same way.
  auto inner = sub->newGroup({0});
  EXPECT_NE(dynamic_cast<DeviceRoutedProcessGroup*>(inner.get()), nullptr);
  EXPECT_EQ(staging.size(), 2u);
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
