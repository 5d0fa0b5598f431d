// The habits users bring from other tools, run on the built `lockstep` binary: --version (also
// in run.json), "did you mean" for a mistyped command, a missing config file named with why and
// where, and --nproc-per-node far past the machine refused before any rank starts.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>

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
