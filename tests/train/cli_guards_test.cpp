// The habits users bring from other tools, run on the built `lockstep` binary: --version (also
// in run.json), "did you mean" for a mistyped command, a missing config file named with why and
// where, --nproc-per-node far past the machine refused before any rank starts, and `lockstep bench`'s
// ranks ending with it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>
#include <vector>

#include "common/free_port.h"
#include "train/train_cli.h"

using namespace lockstep::test;

TEST_F(TrainCli, version_prints_the_project_version_and_run_json_records_it) {
  Result v = runLockstep(dir_, "--version");
  ASSERT_EQ(v.code, 0) << v.output;
  std::smatch m;
  ASSERT_TRUE(
      std::regex_match(v.output, m, std::regex(R"(lockstep (\d+\.\d+\.\d+)( \(commit ([0-9a-f]+)\))?\n)")))
      << v.output;
  EXPECT_EQ(runLockstep(dir_, "version").output, v.output);

  Result r = run(writeConfig("c.yaml", kSynthetic) + " --output-dir " + dir_ + "/o");
  ASSERT_EQ(r.code, 0) << r.output;
  auto env = nlohmann::json::parse(readFile(dir_ + "/o/run.json"))["environment"];
  EXPECT_EQ(env["lockstep_version"], m[1].str()) << env.dump();
  EXPECT_EQ(env["lockstep_commit"], m[3].str()) << env.dump();
}

TEST_F(TrainCli, a_mistyped_command_suggests_the_nearest_and_lists_them_all) {
  Result r = runLockstep(dir_, "trian c.yaml");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("unknown command 'trian'; did you mean 'train'?"), std::string::npos) << r.output;
  for (const char* c : {"run", "train", "report", "version"}) {
    EXPECT_NE(r.output.find("\n  " + std::string(c) + " "), std::string::npos) << c << "\n" << r.output;
  }
  Result far = runLockstep(dir_, "frobnicate");
  EXPECT_EQ(far.code, 2) << far.output;
  EXPECT_NE(far.output.find("unknown command 'frobnicate'\n"), std::string::npos) << far.output;
  EXPECT_EQ(far.output.find("did you mean"), std::string::npos) << far.output;
}

TEST_F(TrainCli, a_config_that_cannot_be_read_is_named_by_its_absolute_path_with_the_reason) {
  Result missing = run("no_such_dir/nosuch.yaml");
  EXPECT_EQ(missing.code, 2) << missing.output;
  const std::string where = (fs::current_path() / "no_such_dir/nosuch.yaml").string();
  EXPECT_NE(missing.output.find("cannot read config file '" + where + "': No such file or directory"),
            std::string::npos)
      << missing.output;
  Result dir = run(dir_);
  EXPECT_EQ(dir.code, 2) << dir.output;
  EXPECT_NE(dir.output.find("cannot read config file '" + dir_ + "': Is a directory"), std::string::npos)
      << dir.output;
  if (::geteuid() == 0) return;  // root reads a file whatever its mode
  std::string locked = writeConfig("locked.yaml", kSynthetic);
  fs::permissions(locked, fs::perms::none);
  Result denied = run(locked);
  EXPECT_EQ(denied.code, 2) << denied.output;
  EXPECT_NE(denied.output.find("'" + locked + "': Permission denied"), std::string::npos) << denied.output;
}

// A misspelt LOCKSTEP_DISABLE_FUSIONS is an error before anything starts, also for a model that
// reaches no fusion (an MLP), which would otherwise never read it.
TEST_F(TrainCli, a_misspelt_fusion_to_disable_is_refused_whatever_the_model) {
  std::string config = writeConfig("mlp.yaml", kSynthetic);
  ASSERT_EQ(::setenv("LOCKSTEP_DISABLE_FUSIONS", "residual_epilogue,bogus", 1), 0);
  Result r = run(config + " --output-dir " + dir_ + "/fusions");
  ::unsetenv("LOCKSTEP_DISABLE_FUSIONS");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("no fusion is called 'bogus'"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ + "/fusions/run.json")) << "refused before the run starts";
}

TEST_F(TrainCli, far_too_many_ranks_are_refused_before_anything_starts_unless_oversubscribe) {
  std::string cfg = writeConfig("c.yaml", kSynthetic);
  Result r = run(cfg + " --nproc-per-node 40000 --output-dir " + dir_ + "/o");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--nproc-per-node 40000 would start more than 4 ranks per core"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("--oversubscribe"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ + "/o")) << "refused before the output directory was made";
  // --oversubscribe passes the guard: the next check (a bad config) is what stops this run.
  std::string bad = writeConfig("bad.yaml", std::string(kSynthetic) + "epochs: x\n");
  r = run(bad + " --nproc-per-node 40000 --oversubscribe --output-dir " + dir_ + "/o");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(r.output.find("ranks per core"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("epochs"), std::string::npos) << r.output;
}

namespace {

// Processes whose environment holds LOCKSTEP_BENCH_LAUNCHER=<launcher>: the bench's ranks.
std::vector<pid_t> benchRanksOf(pid_t launcher) {
  std::vector<pid_t> out;
  const std::string mark = "LOCKSTEP_BENCH_LAUNCHER=" + std::to_string(launcher);
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::istringstream env(readFile(e.path().string() + "/environ"));
    for (std::string entry; std::getline(env, entry, '\0');) {
      if (entry == mark) {
        out.push_back(static_cast<pid_t>(std::stoi(name)));
        break;
      }
    }
  }
  return out;
}

}  // namespace

// `lockstep bench`: sizes it cannot run are refused naming them, and stopping the launcher stops its
// ranks (they were left running under init).
TEST_F(TrainCli, bench_refuses_bad_sizes_and_its_ranks_end_with_it) {
  Result neg = runLockstep(dir_, "bench allreduce --nproc 2 --sizes -4");
  EXPECT_EQ(neg.code, 2) << neg.output;
  EXPECT_NE(neg.output.find("--sizes"), std::string::npos) << neg.output;
  Result tiny = runLockstep(dir_, "bench reduce_scatter --nproc 2 --sizes 4");
  EXPECT_EQ(tiny.code, 2) << tiny.output;
  EXPECT_NE(tiny.output.find("--sizes 4: less than one f32 element per rank (8 bytes)"), std::string::npos)
      << tiny.output;
  const pid_t launcher = ::fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    ::execl(LOCKSTEP_BIN, LOCKSTEP_BIN, "bench", "allreduce", "--backend", "shm", "--nproc", "2", "--sizes",
            "16777216", "--iters", "1000000", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  std::vector<pid_t> ranks;
  for (int i = 0; i < 200 && ranks.size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ranks = benchRanksOf(launcher);
  }
  ASSERT_EQ(ranks.size(), 2u) << "the bench's two ranks did not start";
  ::kill(launcher, SIGTERM);
  int status = 0;
  ::waitpid(launcher, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
  for (int i = 0; i < 100 && !benchRanksOf(launcher).empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(benchRanksOf(launcher).empty()) << "ranks left running after the launcher was stopped";
}

// Two ranks started by hand (torchrun's variables) with another seed on rank 1: they trained on
// apart, silently. Now every rank refuses at the start, naming rank 1; other roots are fine.
TEST_F(TrainCli, ranks_with_different_configs_are_refused_naming_the_rank) {
  std::string cfg = writeConfig("c.yaml", kSynthetic);
  int job = 0;
  auto both = [&](const std::string& rank1_extra) {
    const std::string port = std::to_string(lockstep::testing::freePort());
    const std::string out = dir_ + "/job" + std::to_string(++job);
    const std::string env = "MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port + " WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 ";
    const std::string cmd = "( " + env + "RANK=0 LOCAL_RANK=0 " + LOCKSTEP_BIN + " train " + cfg +
                            " --output-dir " + out + "/a --set backend=gloo > " + dir_ +
                            "/r0.txt 2>&1; echo $? > " + dir_ + "/c0.txt ) & ( " + env +
                            "RANK=1 LOCAL_RANK=1 " + LOCKSTEP_BIN + " train " + cfg + " --output-dir " + out +
                            "/b --set backend=gloo " + rank1_extra + " > " + dir_ +
                            "/r1.txt 2>&1; echo $? > " + dir_ + "/c1.txt ); wait";
    EXPECT_EQ(std::system(("timeout 120 bash -c '" + cmd + "'").c_str()), 0);
    return std::pair{std::stoi(readFile(dir_ + "/c0.txt")), std::stoi(readFile(dir_ + "/c1.txt"))};
  };
  auto [c0, c1] = both("--set seed=7");
  EXPECT_EQ(c0, 2) << readFile(dir_ + "/r0.txt");
  EXPECT_EQ(c1, 2) << readFile(dir_ + "/r1.txt");
  for (const char* out : {"/r0.txt", "/r1.txt"})
    EXPECT_NE(readFile(dir_ + out).find("the ranks do not train with the same config: rank 1 has another"),
              std::string::npos)
        << readFile(dir_ + out);
  auto [d0, d1] = both("--set data.num_workers=1");  // how a host loads its data may differ
  EXPECT_EQ(d0, 0) << readFile(dir_ + "/r0.txt");
  EXPECT_EQ(d1, 0) << readFile(dir_ + "/r1.txt");
}

// eval.every_steps (nanoGPT's eval_interval): a validation pass every so many steps besides the
// epochs' ends, never twice for one step. 6 steps an epoch, max_steps 20, every 4 steps.
TEST_F(TrainCli, eval_every_steps_validates_between_the_epochs_ends) {
  std::string config = writeConfig("mlp.yaml", kSynthetic);
  Result r = run(config + " --output-dir " + dir_ + "/ev --set eval.every_steps=4");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(metricSteps(dir_ + "/ev", "val/loss"), (std::vector<int64_t>{4, 6, 8, 12, 16, 18, 20}))
      << readFile(dir_ + "/ev/metrics.csv");
  Result bad = run(config + " --output-dir " + dir_ + "/ev2 --set eval.every_steps=-1");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("eval.every_steps must be >= 0"), std::string::npos) << bad.output;
}
