// --nproc-per-node against the machine: the pure check (rank_capacity.h) and `lockstep run`
// refusing a count far past the cores before it starts anything, unless --oversubscribe.
#include "lockstep/launch/rank_capacity.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "launch/process_harness.h"
#include "lockstep/launch/launch_options.h"
#include "lockstep/util/error.h"

using namespace lockstep;
using namespace lockstep::launch;

namespace {

std::string refusal(int nproc, const MachineCapacity& m, bool oversubscribe = false) {
  try {
    checkRanksFit("--nproc-per-node", nproc, m, oversubscribe);
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(RankCapacity, allows_four_ranks_per_core_and_names_the_cores_and_the_fix_past_that) {
  const MachineCapacity two_cores{2, int64_t{8} << 30, "MemAvailable in /proc/meminfo"};
  EXPECT_EQ(refusal(1, two_cores), "");
  EXPECT_EQ(refusal(8, two_cores), "");  // the 4-rank tests on a 2-core CI machine start
  EXPECT_EQ(refusal(9, two_cores),
            "--nproc-per-node 9 would start more than 4 ranks per core: this process may use 2 cores (at "
            "most 8 ranks); give a smaller count (auto starts one per core), or add --oversubscribe to start "
            "them anyway");
  EXPECT_EQ(refusal(40000, two_cores, /*oversubscribe=*/true), "");
  EXPECT_NE(refusal(5, {1, 0, ""}).find("may use 1 core (at most 4 ranks)"), std::string::npos);
  EXPECT_EQ(refusal(1, {1, 1 << 20, "x"}), "");  // one rank is never refused
}

TEST(RankCapacity, refuses_ranks_the_memory_could_not_hold_and_says_how_many_fit) {
  const MachineCapacity small{64, int64_t{512} << 20, "this process's cgroup memory limit"};
  EXPECT_EQ(refusal(32, small), "");  // 16 MiB each
  EXPECT_EQ(refusal(33, small),
            "--nproc-per-node 33 ranks need at least 528 MiB (16 MiB each, before any model or data) but "
            "512 MiB of memory is available (this process's cgroup memory limit); give at most 32 ranks, or "
            "add --oversubscribe to start them anyway");
  EXPECT_EQ(refusal(33, small, true), "");
  EXPECT_EQ(refusal(200, {64, 0, ""}), "");  // memory unknown: only the cores count
}

TEST(RankCapacity, probes_this_machine) {
  MachineCapacity m = probeMachineCapacity();
  EXPECT_EQ(m.cores, availableCores());
  EXPECT_GT(m.memory_bytes, kMinRankBytes) << m.memory_source;
  EXPECT_FALSE(m.memory_source.empty());
}

TEST(RankCapacity, run_refuses_far_too_many_ranks_before_starting_any) {
  const std::string out =
      (std::filesystem::temp_directory_path() / ("lockstep-capacity-" + std::to_string(::getpid()) + ".txt"))
          .string();
  auto r =
      launch::testing::runAgent({"--nproc-per-node", "40000", "--standalone", LOCKSTEP_TEST_WORKER}, out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(
      r.output.find("--nproc-per-node 40000 would start more than 4 ranks per core: this process may use " +
                    std::to_string(availableCores())),
      std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("[rank"), std::string::npos) << r.output;
  // Past the limit with --oversubscribe: all of them start and finish (where that is a few processes).
  const int over = 4 * availableCores() + 1;
  if (over > 33) return;
  r = launch::testing::runAgent(
      {"--nproc-per-node", std::to_string(over), "--oversubscribe", "--standalone", LOCKSTEP_TEST_WORKER},
      out, std::chrono::seconds(120));
  EXPECT_EQ(r.code, 0) << r.output;
  std::filesystem::remove(out);
}
