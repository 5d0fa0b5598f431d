// Ranks that share a GPU (comm/device_sharing.h): the pure decision from every rank's GPU
// identity, the messages, the local-rank -> GPU rule, the exchange through the store, and
// DeviceRoutedProcessGroup choosing its group for GPU buffers at the first op on them, alike on
// every rank. Without a GPU: host groups stand in for nccl and the host-staged group, and a
// stand-in identify() says which GPU each rank has.
#include "lockstep/comm/device_sharing.h"

#include <gtest/gtest.h>

#include <atomic>

#include "comm/comm_test_util.h"
#include "lockstep/comm/device_routed_process_group.h"
#include "lockstep/comm/store/hash_store.h"
#include "lockstep/comm/store/prefix_store.h"
#include "lockstep/util/error.h"

namespace lockstep::comm {
namespace {

using namespace std::chrono_literals;

std::vector<DeviceIdentity> gpus(const std::vector<std::pair<std::string, int>>& list) {
  std::vector<DeviceIdentity> ids;
  for (const auto& [uuid, ordinal] : list) ids.push_back({uuid, ordinal});
  return ids;
}

TEST(DeviceSharing, ranks_with_gpus_of_their_own_share_nothing) {
  auto ids = gpus({{"GPU-a", 0}, {"GPU-b", 1}, {"GPU-c", 0}});  // rank 2: another host's cuda:0
  EXPECT_FALSE(findSharedDevices(ids).shared());
  EXPECT_EQ(describeSharing(findSharedDevices(ids), ids), "");
  EXPECT_FALSE(findSharedDevices({}).shared());
  EXPECT_FALSE(findSharedDevices(gpus({{"GPU-a", 0}})).shared());
}

TEST(DeviceSharing, ranks_on_one_gpu_are_found_whatever_its_ordinal) {
  // Two ranks on cuda:0 of one machine.
  auto two = gpus({{"GPU-a", 0}, {"GPU-a", 0}});
  DeviceSharing s = findSharedDevices(two);
  ASSERT_TRUE(s.shared());
  EXPECT_EQ(s.groups, (std::vector<std::vector<int>>{{0, 1}}));
  EXPECT_EQ(describeSharing(s, two), "ranks 0 and 1 share cuda:0");
  // Three on one GPU and two on another, interleaved; a rank alone on a third.
  auto five = gpus({{"GPU-b", 1}, {"GPU-a", 0}, {"GPU-b", 1}, {"GPU-a", 0}, {"GPU-b", 1}, {"GPU-c", 2}});
  s = findSharedDevices(five);
  EXPECT_EQ(s.groups, (std::vector<std::vector<int>>{{0, 2, 4}, {1, 3}}));
  EXPECT_EQ(describeSharing(s, five), "ranks 0, 2 and 4 share cuda:1; ranks 1 and 3 share cuda:0");
  // CUDA_VISIBLE_DEVICES numbers one GPU differently in two processes: the UUID decides.
  auto renumbered = gpus({{"GPU-a", 0}, {"GPU-a", 1}});
  s = findSharedDevices(renumbered);
  EXPECT_EQ(s.groups, (std::vector<std::vector<int>>{{0, 1}}));
  EXPECT_EQ(describeSharing(s, renumbered),
            "ranks 0 and 1 share one GPU (cuda:0 on rank 0, cuda:1 on rank 1)");
}

TEST(DeviceSharing, an_unknown_gpu_shares_with_nobody) {
  EXPECT_FALSE(findSharedDevices(gpus({{"", 0}, {"", 0}})).shared());
}

TEST(DeviceSharing, messages_name_the_ranks_the_path_and_the_fix) {
  EXPECT_EQ(hostStagedNote("ranks 0 and 1 share cuda:0", "shm"),
            "ranks 0 and 1 share cuda:0: GPU collectives go through the host (shm), not NCCL, which runs one "
            "rank per GPU");
  const std::string e = ncclSharedGpuError("ranks 0 and 1 share cuda:0");
  EXPECT_EQ(e.rfind("backend nccl: ranks 0 and 1 share cuda:0, but NCCL runs one rank per GPU", 0), 0u) << e;
  EXPECT_NE(e.find("use backend auto (or gloo, shm)"), std::string::npos) << e;
}

TEST(DeviceSharing, local_ranks_take_gpus_round_robin) {
  EXPECT_EQ(localRankDevice(0, 8), 0);
  EXPECT_EQ(localRankDevice(5, 8), 5);  // enough GPUs: cuda:LOCAL_RANK, torchrun's rule
  EXPECT_EQ(localRankDevice(1, 1), 0);  // more ranks than GPUs: they share
  EXPECT_EQ(localRankDevice(3, 2), 1);
  EXPECT_EQ(localRankDevice(-1, 4), 0);  // not started by a launcher
  auto ids = localRankDevices(4, 2);
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_EQ(ids[2], (DeviceIdentity{"cuda:0", 0}));
  EXPECT_EQ(describeSharing(findSharedDevices(ids), ids),
            "ranks 0 and 2 share cuda:0; ranks 1 and 3 share cuda:1");
  EXPECT_FALSE(findSharedDevices(localRankDevices(2, 2)).shared());
  EXPECT_FALSE(findSharedDevices(localRankDevices(1, 1)).shared());
}

TEST(DeviceSharing, identities_round_trip_through_text_and_bad_text_is_named) {
  DeviceIdentity id{"GPU-8c3e0b1a-0000-1111-2222-333344445555", 3};
  EXPECT_EQ(formatDeviceIdentity(id), "3 GPU-8c3e0b1a-0000-1111-2222-333344445555");
  EXPECT_EQ(parseDeviceIdentity(formatDeviceIdentity(id)), id);
  for (const std::string bad : {"", "3", "x GPU-a", "-1 GPU-a"}) {
    try {
      parseDeviceIdentity(bad);
      ADD_FAILURE() << "expected ValueError for '" << bad << "'";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("'" + bad + "'"), std::string::npos) << e.what();
    }
  }
}

TEST(DeviceSharing, every_rank_gets_every_identity_and_a_missing_rank_is_named) {
  auto store = std::make_shared<HashStore>();
  const std::vector<DeviceIdentity> want = gpus({{"GPU-a", 0}, {"GPU-a", 0}, {"GPU-b", 1}});
  testing::runRanks(3, [&](int r) {
    EXPECT_EQ(exchangeDeviceIdentities(*store, r, 3, want[static_cast<size_t>(r)], 30s), want);
  });
  auto lonely = std::make_shared<HashStore>();
  try {
    exchangeDeviceIdentities(*lonely, 0, 2, want[0], 100ms);
    ADD_FAILURE() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("gpu/1"), std::string::npos) << e.what();
  }
}

// A host group that takes ops on "GPU buffers" (host memory here) as the host-staged group would,
// so that the chosen group's collectives really run.
class AsIfDevice : public ProcessGroup {
 public:
  explicit AsIfDevice(std::shared_ptr<ProcessGroup> inner)
      : ProcessGroup(inner->rank(), inner->size()), inner_(std::move(inner)) {}
  ~AsIfDevice() override { stopWorker(); }
  std::string backendName() const override { return inner_->backendName(); }
  std::shared_ptr<Work> allreduce(void* data, size_t count, DType dtype,
                                  const AllreduceOptions& opts) override {
    AllreduceOptions o = opts;
    o.place = {};
    return inner_->allreduce(data, count, dtype, o);
  }
  ProcessGroup& inner() { return *inner_; }

 private:
  std::shared_ptr<ProcessGroup> inner_;
};

struct Choice {
  std::shared_ptr<DeviceRoutedProcessGroup> group;
  std::shared_ptr<AsIfDevice> own, shared;  // whichever was made
  std::vector<std::string> logged;
  int identified = 0;
};

// Rank r of a routed group whose ranks have the GPUs uuids[r] (all on cuda:0 as each sees it).
std::unique_ptr<Choice> routed(std::shared_ptr<Store> store, int r, const std::vector<std::string>& uuids) {
  const int n = static_cast<int>(uuids.size());
  auto c = std::make_unique<Choice>();
  Choice* raw = c.get();
  DevicePathOptions p;
  p.store = std::make_shared<PrefixStore>("route", store);
  p.identify = [raw, uuid = uuids[static_cast<size_t>(r)]](int device) {
    ++raw->identified;
    return DeviceIdentity{uuid, device};
  };
  p.own_gpus = [=] {
    return raw->own = std::make_shared<AsIfDevice>(
               testing::makeGroup("gloo", std::make_shared<PrefixStore>("own", store), r, n));
  };
  p.shared_gpus = [=] {
    return raw->shared = std::make_shared<AsIfDevice>(
               testing::makeGroup("shm", std::make_shared<PrefixStore>("staged", store), r, n));
  };
  p.log = [raw](const std::string& line) { raw->logged.push_back(line); };
  c->group = std::make_shared<DeviceRoutedProcessGroup>(
      testing::makeGroup("shm", std::make_shared<PrefixStore>("host", store), r, n), std::move(p));
  return c;
}

TEST(DeviceRoutedProcessGroup, ranks_sharing_a_gpu_all_choose_the_host_path_at_the_first_gpu_op) {
  auto store = std::make_shared<HashStore>();
  store->setTimeout(30s);
  std::vector<std::unique_ptr<Choice>> choices(3);
  testing::runRanks(3, [&](int r) {
    choices[static_cast<size_t>(r)] = routed(store, r, {"GPU-a", "GPU-b", "GPU-a"});
    Choice& c = *choices[static_cast<size_t>(r)];
    EXPECT_EQ(c.group->deviceGroup(), nullptr);
    std::vector<float> host(5, 1.0f);
    c.group->allreduce(host.data(), host.size(), DType::f32)->wait();  // host ops choose nothing
    EXPECT_EQ(c.identified, 0);
    EXPECT_EQ(c.group->deviceGroup(), nullptr);
    for (int i = 0; i < 3; ++i) {
      std::vector<double> v(7, r + 1.0);
      AllreduceOptions o;
      o.place = {0, nullptr};
      c.group->allreduce(v.data(), v.size(), DType::f64, o)->wait();
      EXPECT_EQ(v, std::vector<double>(7, 6.0));
    }
  });
  for (int r = 0; r < 3; ++r) {
    Choice& c = *choices[static_cast<size_t>(r)];
    EXPECT_EQ(c.identified, 1) << "rank " << r;  // once, at the first op on GPU buffers
    ASSERT_NE(c.shared, nullptr) << "rank " << r;
    EXPECT_EQ(c.own, nullptr) << "rank " << r;
    EXPECT_EQ(c.group->deviceGroup(), c.shared.get());
    EXPECT_EQ(c.shared->inner().sequenceNumber(), 3u);
    EXPECT_EQ(c.group->hostGroup().sequenceNumber(), 1u);
    // Said once in the job: by rank 0.
    EXPECT_EQ(c.logged, r == 0 ? std::vector<std::string>{"ranks 0 and 2 share cuda:0: GPU collectives go "
                                                          "through the host (shm), not NCCL, which runs one "
                                                          "rank per GPU"}
                               : std::vector<std::string>{});
  }
}

TEST(DeviceRoutedProcessGroup, ranks_with_gpus_of_their_own_choose_the_own_gpu_path_silently) {
  auto store = std::make_shared<HashStore>();
  store->setTimeout(30s);
  std::vector<std::unique_ptr<Choice>> choices(2);
  testing::runRanks(2, [&](int r) {
    choices[static_cast<size_t>(r)] = routed(store, r, {"GPU-a", "GPU-b"});
    std::vector<int32_t> v = {r, 10};
    AllreduceOptions o;
    o.place = {0, nullptr};
    o.op = ReduceOp::max;
    choices[static_cast<size_t>(r)]->group->allreduce(v.data(), v.size(), DType::i32, o)->wait();
    EXPECT_EQ(v, (std::vector<int32_t>{1, 10}));
  });
  for (auto& c : choices) {
    ASSERT_NE(c->own, nullptr);
    EXPECT_EQ(c->shared, nullptr);
    EXPECT_EQ(c->own->backendName(), "gloo");
    EXPECT_TRUE(c->logged.empty());
  }
}

// A group of any size made without its peers (ProcessGroup's constructor is not collective).
class Idle : public ProcessGroup {
 public:
  Idle(int rank, int size) : ProcessGroup(rank, size) {}
  ~Idle() override { stopWorker(); }
  std::string backendName() const override { return "idle"; }
};

TEST(DeviceRoutedProcessGroup, a_rank_that_never_says_its_gpu_fails_the_choice_and_later_gpu_ops) {
  int identified = 0, made = 0;
  DevicePathOptions p;
  p.store = std::make_shared<HashStore>();
  p.identify = [&](int device) {
    ++identified;
    return DeviceIdentity{"GPU-a", device};
  };
  p.own_gpus = p.shared_gpus = [&] {
    ++made;
    return std::make_shared<Idle>(0, 2);
  };
  DeviceRoutedProcessGroup pg(std::make_shared<Idle>(0, 2), std::move(p));  // rank 1 never comes
  pg.setTimeout(200ms);
  float x = 1;
  AllreduceOptions o;
  o.place = {0, nullptr};
  EXPECT_THROW(pg.allreduce(&x, 1, DType::f32, o), TimeoutError);
  try {
    pg.allreduce(&x, 1, DType::f32, o);
    ADD_FAILURE() << "expected PeerError";
  } catch (const PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("choosing the group for GPU buffers failed earlier"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("gpu/1"), std::string::npos) << e.what();
  }
  EXPECT_EQ(identified, 1);
  EXPECT_EQ(made, 0);
  EXPECT_EQ(pg.deviceGroup(), nullptr);
}

TEST(DeviceRoutedProcessGroup,
     a_backend_asked_for_by_name_moves_gpu_buffers_through_the_host_without_asking) {
  auto store = std::make_shared<HashStore>();
  std::shared_ptr<AsIfDevice> staged;
  DevicePathOptions p;
  p.name = "gloo";
  p.shared_gpus = [&] {
    return staged = std::make_shared<AsIfDevice>(
               testing::makeGroup("gloo", std::make_shared<PrefixStore>("staged", store), 0, 1));
  };
  DeviceRoutedProcessGroup pg(testing::makeGroup("gloo", std::make_shared<PrefixStore>("host", store), 0, 1),
                              std::move(p));
  EXPECT_EQ(pg.backendName(), "gloo");
  std::vector<float> v = {1, 2};
  AllreduceOptions o;
  o.place = {0, nullptr};
  pg.allreduce(v.data(), v.size(), DType::f32, o)->wait();
  ASSERT_NE(staged, nullptr);
  EXPECT_EQ(pg.deviceGroup(), staged.get());
  EXPECT_EQ(v, (std::vector<float>{1, 2}));
}

}  // namespace
}  // namespace lockstep::comm
