// comm::workerEnvironment(): one reader for every launcher's variables, and the launcher's
// writer (workerVariables) that it reads back.
#include "lockstep/comm/worker_environment.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "lockstep/util/error.h"

using namespace lockstep;
using namespace lockstep::comm;

namespace {

EnvLookup fake(std::map<std::string, std::string> vars) {
  return [vars](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

}  // namespace

TEST(WorkerEnvironment, lockstep_run_variables) {
  auto id = workerEnvironment(fake({{"RANK", "3"},
                                    {"WORLD_SIZE", "4"},
                                    {"LOCAL_RANK", "1"},
                                    {"LOCAL_WORLD_SIZE", "2"},
                                    {"MASTER_ADDR", "h0"},
                                    {"MASTER_PORT", "29501"},
                                    {"LOCKSTEP_RUN_ID", "x"},
                                    {"LOCKSTEP_USE_AGENT_STORE", "1"},
                                    {"LOCKSTEP_STORE_PREFIX", "/worker/attempt_1/"},
                                    {"LOCKSTEP_RESTART_COUNT", "1"}}));
  EXPECT_EQ(id.launcher, Launcher::lockstep_run);
  EXPECT_EQ(id.rank, 3);
  EXPECT_EQ(id.local_rank, 1);
  EXPECT_EQ(id.master_addr, "h0");
  EXPECT_EQ(id.master_port, 29501);
  EXPECT_TRUE(id.agent_store);
  EXPECT_EQ(id.store_prefix, "/worker/attempt_1/");
  EXPECT_EQ(id.restart_count, 1);
}

TEST(WorkerEnvironment, open_mpi_variables) {
  auto id = workerEnvironment(fake({{"OMPI_COMM_WORLD_RANK", "5"},
                                    {"OMPI_COMM_WORLD_SIZE", "8"},
                                    {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                    {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                                    {"MASTER_ADDR", "n0"}}));
  EXPECT_EQ(id.launcher, Launcher::open_mpi);
  EXPECT_EQ(id.rank, 5);
  EXPECT_EQ(id.world_size, 8);
  EXPECT_EQ(id.local_world_size, 4);
  EXPECT_EQ(id.master_addr, "n0");
  EXPECT_FALSE(id.agent_store);
}

TEST(WorkerEnvironment, mpirun_across_hosts_needs_master_addr) {
  try {
    workerEnvironment(fake(
        {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}}));
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("MASTER_ADDR"), std::string::npos);
  }
  auto single = workerEnvironment(fake({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "1"}}));
  EXPECT_EQ(single.launcher, Launcher::mpich);
  EXPECT_EQ(single.master_addr, "127.0.0.1");
}

TEST(WorkerEnvironment, slurm_variables) {
  auto id = workerEnvironment(fake({{"SLURM_PROCID", "6"},
                                    {"SLURM_NTASKS", "8"},
                                    {"SLURM_LOCALID", "2"},
                                    {"SLURM_NTASKS_PER_NODE", "4"},
                                    {"SLURM_JOB_ID", "123456"},
                                    {"SLURM_JOB_NODELIST", "gpu[07-08]"}}));
  EXPECT_EQ(id.launcher, Launcher::slurm);
  EXPECT_EQ(id.rank, 6);
  EXPECT_EQ(id.local_rank, 2);
  EXPECT_EQ(id.local_world_size, 4);
  EXPECT_EQ(id.master_addr, "gpu07");
  EXPECT_EQ(id.master_port, 20000 + 123456 % 10000);
  EXPECT_EQ(firstSlurmHost("node[03-05,9],gpu1"), "node03");
  EXPECT_EQ(firstSlurmHost("a,b"), "a");
  EXPECT_EQ(firstSlurmHost("gpu1,node[1-2]"), "gpu1");
}

TEST(WorkerEnvironment, nothing_set_is_a_single_process) {
  auto id = workerEnvironment(fake({}));
  EXPECT_EQ(id.launcher, Launcher::none);
  EXPECT_EQ(id.rank, 0);
  EXPECT_EQ(id.world_size, 1);
  EXPECT_THROW(workerEnvironment(fake({{"RANK", "4"}, {"WORLD_SIZE", "4"}})), ValueError);
  EXPECT_THROW(workerEnvironment(fake({{"RANK", "x"}, {"WORLD_SIZE", "4"}})), ValueError);
}

TEST(WorkerEnvironment, mpirun_on_one_host_defaults_the_rendezvous) {
  auto id = workerEnvironment(fake({{"OMPI_COMM_WORLD_RANK", "1"},
                                    {"OMPI_COMM_WORLD_SIZE", "2"},
                                    {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                    {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}));
  EXPECT_EQ(id.master_addr, "127.0.0.1");
  EXPECT_EQ(id.master_port, 29500);
  EXPECT_EQ(id.num_nodes, 1);
  EXPECT_FALSE(id.agent_store);  // rank 0 hosts the store
  EXPECT_TRUE(isMpiLauncher(id.launcher));
  auto two_hosts = workerEnvironment(fake({{"OMPI_COMM_WORLD_RANK", "5"},
                                           {"OMPI_COMM_WORLD_SIZE", "8"},
                                           {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                           {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                                           {"MASTER_ADDR", "n0"},
                                           {"MASTER_PORT", "1234"}}));
  EXPECT_EQ(two_hosts.node_rank, 1);
  EXPECT_EQ(two_hosts.num_nodes, 2);
  EXPECT_EQ(two_hosts.master_port, 1234);
}

TEST(WorkerEnvironment, torchrun_variables_name_no_default_rendezvous) {
  // As torch: whoever sets RANK/WORLD_SIZE also says where to meet (init_method env:// then
  // names the missing variable).
  auto id = workerEnvironment(fake({{"RANK", "0"}, {"WORLD_SIZE", "2"}}));
  EXPECT_EQ(id.launcher, Launcher::torchrun);
  EXPECT_EQ(id.master_addr, "");
  EXPECT_EQ(id.master_port, 0);
}

TEST(WorkerEnvironment, partial_or_malformed_variables_are_errors_naming_them) {
  auto error = [](std::map<std::string, std::string> vars) {
    try {
      workerEnvironment(fake(vars));
    } catch (const ValueError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error({{"WORLD_SIZE", "2"}}).find("RANK is not"), std::string::npos);
  EXPECT_NE(error({{"RANK", "1"}}).find("WORLD_SIZE is not"), std::string::npos);
  EXPECT_NE(error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}).find("MASTER_PORT='70000'"),
            std::string::npos);
  EXPECT_NE(error({{"RANK", "0"}, {"WORLD_SIZE", "-2"}}).find("WORLD_SIZE='-2'"), std::string::npos);
  EXPECT_NE(error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCKSTEP_USE_AGENT_STORE", "maybe"}})
                .find("LOCKSTEP_USE_AGENT_STORE='maybe'"),
            std::string::npos);
}

TEST(WorkerEnvironment, reads_back_what_the_launcher_writes) {
  WorkerEnvironment w;
  w.rank = 5;
  w.world_size = 6;
  w.local_rank = 2;
  w.local_world_size = 3;
  w.node_rank = 1;
  w.num_nodes = 2;
  w.master_addr = "node0";
  w.master_port = 29555;
  w.agent_store = true;
  w.store_addr = "node0-agent";
  w.store_port = 29400;
  w.store_prefix = "/worker/attempt_3/";
  w.restart_count = 3;
  w.max_restarts = 4;
  w.run_id = "job7";
  w.error_file = "/tmp/err.json";
  w.launcher = Launcher::lockstep_run;
  auto vars = workerVariables(w);
  for (const auto& [k, v] : vars) {
    EXPECT_NE(std::find(workerVariableNames().begin(), workerVariableNames().end(), k),
              workerVariableNames().end())
        << k << " is written but not listed";
  }
  EXPECT_EQ(vars["TORCHELASTIC_RESTART_COUNT"], "3");  // what torch-style programs read
  WorkerEnvironment r = workerEnvironment([&](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
  EXPECT_EQ(r.rank, w.rank);
  EXPECT_EQ(r.world_size, w.world_size);
  EXPECT_EQ(r.local_rank, w.local_rank);
  EXPECT_EQ(r.local_world_size, w.local_world_size);
  EXPECT_EQ(r.node_rank, w.node_rank);
  EXPECT_EQ(r.num_nodes, w.num_nodes);
  EXPECT_EQ(r.master_addr, w.master_addr);
  EXPECT_EQ(r.master_port, w.master_port);
  EXPECT_EQ(r.agent_store, w.agent_store);
  EXPECT_EQ(r.store_addr, w.store_addr);
  EXPECT_EQ(r.store_port, w.store_port);
  // PyTorch's env:// must host its own store on MASTER_PORT, not dial the agent's.
  EXPECT_EQ(vars["TORCHELASTIC_USE_AGENT_STORE"], "False");
  EXPECT_EQ(r.store_prefix, w.store_prefix);
  EXPECT_EQ(r.restart_count, w.restart_count);
  EXPECT_EQ(r.max_restarts, w.max_restarts);
  EXPECT_EQ(r.run_id, w.run_id);
  EXPECT_EQ(r.error_file, w.error_file);
  EXPECT_EQ(r.launcher, w.launcher);
}

TEST(WorkerEnvironment, timeout_and_join_token_under_any_launcher) {
  auto e = workerEnvironment(fake({{"LOCKSTEP_TIMEOUT", "2.5"}, {"LOCKSTEP_JOIN_TOKEN", "secret"}}));
  EXPECT_EQ(e.timeout, std::chrono::milliseconds(2500));
  EXPECT_EQ(e.join_token, "secret");
  EXPECT_FALSE(workerEnvironment(fake({})).timeout.has_value());
  for (const char* bad : {"0", "-1", "abc", "nan", "inf", ""}) {
    try {
      workerEnvironment(fake({{"LOCKSTEP_TIMEOUT", bad}}));
      ADD_FAILURE() << "LOCKSTEP_TIMEOUT='" << bad << "' accepted";
    } catch (const ValueError& err) {
      EXPECT_NE(std::string(err.what()).find("LOCKSTEP_TIMEOUT"), std::string::npos) << err.what();
    }
  }
  WorkerEnvironment w;
  w.timeout = std::chrono::milliseconds(20000);
  w.join_token = "tok";
  auto vars = workerVariables(w);
  EXPECT_EQ(vars["LOCKSTEP_TIMEOUT"], "20");
  EXPECT_EQ(vars["LOCKSTEP_JOIN_TOKEN"], "tok");
}
