// A GoogleTest program for the GPU check's own test (train/gpu_check_harness.sh): it behaves as a GPU
// test program does after a kernel fault. The fault's test fails, and the process stays poisoned (CUDA's
// sticky errors): every later test in it fails or aborts, though each passes alone. The check's runner
// (scripts/gpu_check/gtests.py) must tell the one from the others by running them one per process.
// Not a CTest test: its failures are its purpose.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace {

bool poisoned = false;

TEST(Fixture, passes) { EXPECT_FALSE(poisoned); }

TEST(Fixture, faults) {
  poisoned = true;
  ADD_FAILURE() << "CUDA error: an illegal memory access was encountered (fixture)";
}

TEST(Fixture, fails_once_poisoned) {
  EXPECT_FALSE(poisoned) << "CUDA error: an illegal memory access was encountered (an earlier test's)";
}

TEST(Fixture, aborts_once_poisoned) {
  if (poisoned) {
    std::fputs("terminate called after a sticky CUDA error (fixture)\n", stderr);
    std::abort();
  }
}

// Hangs where GPU_CHECK_FIXTURE_HANG is set (a kernel that never ends), else passes.
TEST(Fixture, hangs_when_asked) {
  if (std::getenv("GPU_CHECK_FIXTURE_HANG") != nullptr) {
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

TEST(Fixture, runs_last) { EXPECT_FALSE(poisoned); }

}  // namespace
