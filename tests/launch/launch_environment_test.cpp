#include "lockstep/launch/launch_environment.h"

#include <gtest/gtest.h>

#include <map>

#include "lockstep/util/error.h"

using namespace lockstep;
using namespace lockstep::launch;

namespace {

EnvLookup fake(std::map<std::string, std::string> vars) {
  return [vars](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

}  // namespace

TEST(launch_environment, lockstep_run_variables) {
  auto id = workerIdentity(fake({{"RANK", "3"},
                                 {"WORLD_SIZE", "4"},
                                 {"LOCAL_RANK", "1"},
                                 {"LOCAL_WORLD_SIZE", "2"},
                                 {"MASTER_ADDR", "h0"},
                                 {"MASTER_PORT", "29501"},
                                 {"LOCKSTEP_RUN_ID", "x"},
                                 {"LOCKSTEP_USE_AGENT_STORE", "1"},
                                 {"LOCKSTEP_STORE_PREFIX", "/worker/attempt_1/"},
                                 {"LOCKSTEP_RESTART_COUNT", "1"}}));
  EXPECT_EQ(id.source, "lockstep run");
  EXPECT_EQ(id.rank, 3);
  EXPECT_EQ(id.local_rank, 1);
  EXPECT_EQ(id.master_addr, "h0");
  EXPECT_EQ(id.master_port, 29501);
  EXPECT_TRUE(id.agent_store);
  EXPECT_EQ(id.store_prefix, "/worker/attempt_1/");
  EXPECT_EQ(id.restart_count, 1);
}

TEST(launch_environment, open_mpi_variables) {
  auto id = workerIdentity(fake({{"OMPI_COMM_WORLD_RANK", "5"},
                                 {"OMPI_COMM_WORLD_SIZE", "8"},
                                 {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                 {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                                 {"MASTER_ADDR", "n0"}}));
  EXPECT_EQ(id.source, "Open MPI");
  EXPECT_EQ(id.rank, 5);
  EXPECT_EQ(id.world_size, 8);
  EXPECT_EQ(id.local_world_size, 4);
  EXPECT_EQ(id.master_addr, "n0");
  EXPECT_FALSE(id.agent_store);
}

TEST(launch_environment, mpirun_across_hosts_needs_master_addr) {
  try {
    workerIdentity(fake(
        {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}}));
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("MASTER_ADDR"), std::string::npos);
  }
  auto single = workerIdentity(fake({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "1"}}));
  EXPECT_EQ(single.source, "MPICH");
  EXPECT_EQ(single.master_addr, "127.0.0.1");
}

TEST(launch_environment, slurm_variables) {
  auto id = workerIdentity(fake({{"SLURM_PROCID", "6"},
                                 {"SLURM_NTASKS", "8"},
                                 {"SLURM_LOCALID", "2"},
                                 {"SLURM_NTASKS_PER_NODE", "4"},
                                 {"SLURM_JOB_ID", "123456"},
                                 {"SLURM_JOB_NODELIST", "gpu[07-08]"}}));
  EXPECT_EQ(id.source, "Slurm");
  EXPECT_EQ(id.rank, 6);
  EXPECT_EQ(id.local_rank, 2);
  EXPECT_EQ(id.local_world_size, 4);
  EXPECT_EQ(id.master_addr, "gpu07");
  EXPECT_EQ(id.master_port, 20000 + 123456 % 10000);
  EXPECT_EQ(firstSlurmHost("node[03-05,9],gpu1"), "node03");
  EXPECT_EQ(firstSlurmHost("a,b"), "a");
  EXPECT_EQ(firstSlurmHost("gpu1,node[1-2]"), "gpu1");
}

TEST(launch_environment, nothing_set_is_a_single_process) {
  auto id = workerIdentity(fake({}));
  EXPECT_EQ(id.source, "single process");
  EXPECT_EQ(id.rank, 0);
  EXPECT_EQ(id.world_size, 1);
  EXPECT_THROW(workerIdentity(fake({{"RANK", "4"}, {"WORLD_SIZE", "4"}})), ValueError);
  EXPECT_THROW(workerIdentity(fake({{"RANK", "x"}, {"WORLD_SIZE", "4"}})), ValueError);
}
