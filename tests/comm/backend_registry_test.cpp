// The backend registry: the one list of backend names, and what it says about names it lacks.
#include "lockstep/comm/backend_registry.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "lockstep/comm/hash_store.h"
#include "lockstep/comm/init.h"
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
  const std::vector<std::string> expected = built("mpi")
                                                ? std::vector<std::string>{"shm", "gloo", "mpi", "auto"}
                                                : std::vector<std::string>{"shm", "gloo", "auto"};
  EXPECT_EQ(backendNames(), expected);
  EXPECT_EQ(backendNamesText(), built("mpi") ? "shm, gloo, mpi, auto" : "shm, gloo, auto");
  for (const auto& b : builtBackends()) {
    EXPECT_EQ(findBackend(b.name).name, b.name);
    EXPECT_FALSE(b.summary.empty()) << b.name;
    EXPECT_TRUE(b.create) << b.name;
    EXPECT_EQ(b.needs_store, b.name != "mpi") << b.name;
  }
}

TEST(BackendRegistry, nccl_is_known_but_not_built) {
  EXPECT_EQ(errorOf("nccl"),
            "backend nccl is not built into this lockstep (CUDA/NCCL support is not available "
            "yet); built: " +
                backendNamesText());
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
  EXPECT_EQ(createProcessGroup("auto", store, 0, 1)->backendName(), "shm");  // one host
  try {
    createProcessGroup("nccl", store, 0, 1);
    ADD_FAILURE() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_EQ(std::string(e.what()), errorOf("nccl"));
  }
  try {
    createProcessGroup("gloo", nullptr, 0, 1);
    ADD_FAILURE() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("backend gloo needs a store"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lockstep::comm
