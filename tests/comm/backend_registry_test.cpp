// The backend registry: the one list of backend names, and what it says about names it lacks.
#include "lockstep/comm/backend_registry.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "lockstep/comm/device_routed_process_group.h"
#include "lockstep/comm/init.h"
#include "lockstep/comm/store/hash_store.h"
#include "lockstep/comm/store/prefix_store.h"
#include "lockstep/tensor/device.h"
#include "lockstep/util/error.h"

namespace lockstep::comm {
namespace {

std::string errorOf(const std::string& name) {
  try {
    checkBackendName(name);
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

bool built(const std::string& name) {
  auto names = backendNames();
  return std::find(names.begin(), names.end(), name) != names.end();
}

TEST(BackendRegistry, lists_the_built_backends_in_help_order) {
  std::vector<std::string> expected = {"shm", "gloo"};
  if (LOCKSTEP_WITH_CUDA) expected.push_back("nccl");
  if (built("mpi")) expected.push_back("mpi");
  expected.push_back("auto");
  EXPECT_EQ(backendNames(), expected);
  std::string text;
  for (const auto& name : expected) text += (text.empty() ? "" : ", ") + name;
  EXPECT_EQ(backendNamesText(), text);
  for (const auto& b : builtBackends()) {
    EXPECT_EQ(findBackend(b.name).name, b.name);
    EXPECT_FALSE(b.summary.empty()) << b.name;
    EXPECT_TRUE(b.create) << b.name;
    EXPECT_EQ(b.needs_store, b.name != "mpi") << b.name;
  }
}

TEST(BackendRegistry, nccl_in_a_build_without_cuda_says_how_to_build_it) {
  if (LOCKSTEP_WITH_CUDA) GTEST_SKIP() << "this build has CUDA and the nccl backend";
  EXPECT_EQ(errorOf("nccl"),
            "backend nccl is not built into this lockstep (it was built without CUDA: configure with "
            "-DLOCKSTEP_CUDA=ON (or AUTO) on a machine with the CUDA toolkit and NCCL 2 (nvcc, "
            "libnccl)); built: " +
                backendNamesText());
  // initProcessGroup and createProcessGroup say the same.
  try {
    initProcessGroup({.backend = "nccl"});
    ADD_FAILURE() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_EQ(std::string(e.what()), errorOf("nccl"));
  }
}

TEST(BackendRegistry, nccl_on_a_machine_without_a_gpu_says_none_is_visible) {
  if (!LOCKSTEP_WITH_CUDA)
    GTEST_SKIP() << "built without CUDA: nccl_in_a_build_without_cuda_says_how_to_build_it";
  EXPECT_EQ(errorOf("nccl"), "");
  auto store = std::make_shared<HashStore>();
  std::shared_ptr<ProcessGroup> pg;
  try {
    pg = createProcessGroup("nccl", store, 0, 1);
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("backend nccl needs a CUDA GPU, but this process sees none"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("use backend gloo or shm"), std::string::npos) << e.what();
    return;
  }
  ASSERT_NE(pg, nullptr);
  EXPECT_EQ(pg->backendName(), "nccl");
  GTEST_SKIP() << "a GPU is visible here: tests/comm/gpu_nccl_test.cpp covers the nccl group";
}

TEST(BackendRegistry, a_typo_names_the_nearest_backend_and_the_list) {
  EXPECT_EQ(errorOf("glo"), "unknown backend 'glo' (did you mean gloo?); built: " + backendNamesText());
  EXPECT_EQ(errorOf("shmm"), "unknown backend 'shmm' (did you mean shm?); built: " + backendNamesText());
  EXPECT_EQ(errorOf("infiniband"), "unknown backend 'infiniband'; built: " + backendNamesText());
  EXPECT_NE(errorOf("").find("unknown backend ''"), std::string::npos);
}

TEST(BackendRegistry, mpi_off_build_says_mpi_is_not_built) {
  if (built("mpi"))
    GTEST_SKIP() << "this build has the mpi backend; a -DLOCKSTEP_WITH_MPI=OFF build runs this";
  const std::string m = errorOf("mpi");
  EXPECT_NE(m.find("backend mpi is not built into this lockstep"), std::string::npos) << m;
  EXPECT_NE(m.find("-DLOCKSTEP_WITH_MPI=OFF"), std::string::npos) << m;
  EXPECT_NE(m.find("built: shm, gloo, auto"), std::string::npos) << m;
  // initProcessGroup says the same, before it looks for a rank or a store.
  try {
    initProcessGroup({.backend = "mpi"});
    ADD_FAILURE() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_EQ(std::string(e.what()), m);
  }
}

TEST(BackendRegistry, mpi_on_build_lists_mpi) {
  if (!built("mpi")) GTEST_SKIP() << "built with -DLOCKSTEP_WITH_MPI=OFF";
  EXPECT_EQ(errorOf("mpi"), "");
  EXPECT_FALSE(findBackend("mpi").needs_store);
}

TEST(BackendRegistry, create_process_group_goes_through_the_registry) {
  auto store = std::make_shared<HashStore>();
  EXPECT_EQ(createProcessGroup("shm", store, 0, 1)->backendName(), "shm");
  EXPECT_EQ(createProcessGroup("gloo", store, 0, 1)->backendName(), "gloo");
  auto chosen = createProcessGroup("auto", store, 0, 1);
  if (auto* routed = dynamic_cast<DeviceRoutedProcessGroup*>(chosen.get())) {  // a GPU is visible
    EXPECT_EQ(routed->hostGroup().backendName(), "shm");                       // one host
    EXPECT_EQ(routed->deviceGroup(), nullptr);  // chosen at the first op on GPU buffers
  } else {
    EXPECT_EQ(chosen->backendName(), "shm");  // one host
  }
  if (!LOCKSTEP_WITH_CUDA) {
    try {
      createProcessGroup("nccl", store, 0, 1);
      ADD_FAILURE() << "expected ValueError";
    } catch (const ValueError& e) {
      EXPECT_EQ(std::string(e.what()), errorOf("nccl"));
    }
  }
  try {
    createProcessGroup("gloo", nullptr, 0, 1);
    ADD_FAILURE() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("backend gloo needs a store"), std::string::npos) << e.what();
  }
}

TEST(BackendRegistry, host_backends_reject_device_buffers_and_name_nccl) {
  if (cudaDeviceCount() > 0) {
    GTEST_SKIP() << "a GPU is visible: shm and gloo from the registry take GPU buffers through the host "
                    "(tests/comm/gpu_host_staged_test.cpp)";
  }
  auto store = std::make_shared<HashStore>();
  for (const std::string name : {"shm", "gloo"}) {
    auto pg = createProcessGroup(name, std::make_shared<PrefixStore>(name + "_dev", store), 0, 1);
    float x = 1;
    AllreduceOptions o;
    o.place.device = 0;
    try {
      pg->allreduce(&x, 1, DType::f32, o);
      ADD_FAILURE() << name << ": expected ValueError";
    } catch (const ValueError& e) {
      EXPECT_EQ(std::string(e.what()), "allreduce: backend " + name +
                                           " moves host memory only, but the buffers are on cuda:0; use "
                                           "backend nccl for GPU buffers (or copy them to the host first)");
    }
    BroadcastOptions b;
    b.place.device = 1;
    EXPECT_THROW(pg->broadcast(&x, 1, DType::f32, b), ValueError) << name;
    pg->allreduce(&x, 1, DType::f32)->wait();  // host memory (the default place) still works
    EXPECT_EQ(x, 1.0f);
  }
}

}  // namespace
}  // namespace lockstep::comm
