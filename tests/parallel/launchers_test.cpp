// The same training program under every launcher a user has: torchrun-style variables, a real
// `mpirun`, and srun's variables (a Slurm job's environment, set by the test as srun would). Each
// must form the world its launcher describes, with the documented rendezvous defaults; a backend
// that cannot form it is an error naming both.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "parallel/process_util.h"

using namespace lockstep::test;

namespace {

const std::string kToy = std::string(LOCKSTEP_EXAMPLES_DIR) + "/ddp_toy_linear";

// Tests of this file run in parallel (ctest -j): every log is this process's own.
std::string logPath(const std::string& name) {
  return ::testing::TempDir() + "launchers_" + name + "." + std::to_string(::getpid()) + ".log";
}

bool haveMpirun() { return std::system("command -v mpirun > /dev/null 2>&1") == 0; }

// Output and exit status of a shell command.
std::pair<int, std::string> shell(const std::string& cmd) {
  std::string log = logPath("shell");
  int status = std::system((cmd + " > " + log + " 2>&1").c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(log)};
}

// final_loss of the toy trained by 2 ranks started the torchrun way: the reference.
std::string torchrunToyLoss() {
  const int port = freePort();
  std::vector<Rank> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back(
        spawnRank({kToy, "--max-epochs", "2"}, r, 2, port, logPath("toy_ref" + std::to_string(r))));
  }
  for (auto& r : ranks) EXPECT_EQ(waitFor(r.pid, std::chrono::seconds(120)), 0) << slurp(r.log);
  std::string out = slurp(ranks[0].log);
  size_t at = out.find("final_loss=");
  return at == std::string::npos ? "none" : out.substr(at, out.find('\n', at) - at);
}

}  // namespace

TEST(Launchers, mpirun_forms_the_world_without_master_addr) {
  if (!haveMpirun()) GTEST_SKIP() << "mpirun not installed";
  // No MASTER_ADDR / MASTER_PORT: on one host they default to 127.0.0.1:29500 under mpirun.
  auto [code, out] = shell(
      "env -u MASTER_ADDR -u MASTER_PORT -u RANK -u WORLD_SIZE timeout 120 mpirun -np 2 "
      "--allow-run-as-root --oversubscribe " +
      kToy + " --max-epochs 2");
  ASSERT_EQ(code, 0) << out;
  // 2048 samples / batch 32 / 2 ranks: each rank sees its half, as under torchrun.
  EXPECT_NE(out.find("[rank 1] Epoch 1 | Batchsize 32 | Steps 32"), std::string::npos) << out;
  EXPECT_NE(out.find(torchrunToyLoss()), std::string::npos) << out;
}

TEST(Launchers, slurm_variables_form_the_world_without_master_addr) {
  // srun's variables; the rendezvous defaults to the first host of the node list and a port
  // derived from the job id.
  const int job = 5000 + freePort() % 4000;  // port 20000 + job % 10000, apart from other tests'
  std::vector<Rank> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back(spawnWithEnv({kToy, "--max-epochs", "2"},
                                 {{"SLURM_PROCID", std::to_string(r)},
                                  {"SLURM_LOCALID", std::to_string(r)},
                                  {"SLURM_NTASKS", "2"},
                                  {"SLURM_NTASKS_PER_NODE", "2"},
                                  {"SLURM_NNODES", "1"},
                                  {"SLURM_NODEID", "0"},
                                  {"SLURM_JOB_ID", std::to_string(job)},
                                  {"SLURM_JOB_NODELIST", "localhost"},
                                  {"OMP_NUM_THREADS", "1"}},
                                 logPath("toy_slurm" + std::to_string(r))));
  }
  for (auto& r : ranks) ASSERT_EQ(waitFor(r.pid, std::chrono::seconds(120)), 0) << slurp(r.log);
  std::string out0 = slurp(ranks[0].log), out1 = slurp(ranks[1].log);
  EXPECT_NE(out1.find("[rank 1] Epoch 1 | Batchsize 32 | Steps 32"), std::string::npos) << out1;
  EXPECT_NE(out0.find(torchrunToyLoss()), std::string::npos) << out0;
}

TEST(Launchers, mpi_backend_without_mpirun_is_an_error_naming_both) {
  // Two ranks started the torchrun way asking for the mpi backend: each would be an MPI world of
  // one, training alone while reporting a world of two.
  const std::string bin = std::string(LOCKSTEP_EXAMPLES_DIR) + "/mnist_ddp_job";
  const int port = freePort();
  std::vector<Rank> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back(spawnRank({bin, "--backend", "mpi", "--epochs", "1"}, r, 2, port,
                              logPath("mpi_no_mpirun" + std::to_string(r))));
  }
  for (auto& r : ranks) {
    EXPECT_EQ(waitFor(r.pid, std::chrono::seconds(60)), 2) << slurp(r.log);
    std::string out = slurp(r.log);
    EXPECT_NE(out.find("backend mpi"), std::string::npos) << out;
    EXPECT_NE(out.find("WORLD_SIZE=2"), std::string::npos) << out;
    EXPECT_NE(out.find("mpirun -np 2"), std::string::npos) << out;
  }
}
