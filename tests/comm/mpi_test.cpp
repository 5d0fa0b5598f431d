// The mpi backend under a real `mpirun -np 3`. MPI ranks cannot be threads, so the test runs
// this very binary under mpirun; with LOCKSTEP_COMM_TEST_MPI_WORKER set, a static initialiser
// runs the worker below and exits before GoogleTest starts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>

#include "lockstep/comm/mpi/mpi_process_group.h"
#include "lockstep/util/error.h"

namespace lockstep::comm {
namespace {

#define WORKER_CHECK(cond)                                                                \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "rank %d: check failed: %s (line %d)\n", me, #cond, __LINE__); \
      return 1;                                                                           \
    }                                                                                     \
  } while (0)

int mpiWorker() {
  auto pg = MpiProcessGroup::createWorld({.timeout = std::chrono::seconds(60)});
  const int me = pg->rank(), n = pg->size();
  // allreduce: f32/i64/bf16 with sum, avg, max; counts 0, 1, odd, large.
  for (size_t count : {size_t{0}, size_t{1}, size_t{37}, size_t{1 << 20}}) {
    std::vector<float> f(count + 1, static_cast<float>(me + 1));
    pg->allreduce(f.data(), count, DType::f32)->wait();
    if (count > 0) WORKER_CHECK(f[count - 1] == n * (n + 1) / 2.0f);
    std::vector<int64_t> i(count + 1, me);
    pg->allreduce(i.data(), count, DType::i64, {.op = ReduceOp::max})->wait();
    if (count > 0) WORKER_CHECK(i[0] == n - 1);
    std::vector<BFloat16> b(count + 1, BFloat16(static_cast<float>(me + 1)));
    pg->allreduce(b.data(), count, DType::bf16, {.op = ReduceOp::avg})->wait();
    if (count > 0) WORKER_CHECK(static_cast<float>(b[0]) == (n + 1) / 2.0f);
  }
  double d = me == 1 ? 3.5 : 0.0;
  pg->broadcast(&d, 1, DType::f64, {.root = 1})->wait();
  WORKER_CHECK(d == 3.5);
  std::vector<size_t> counts(n);
  for (int r = 0; r < n; ++r) counts[r] = static_cast<size_t>(r);  // rank 0 sends nothing
  std::vector<int32_t> in(me, me), out(n * (n - 1) / 2 + 1);
  pg->allgatherv(in.data(), out.data(), counts, DType::i32)->wait();
  WORKER_CHECK(out[0] == 1 && out[n * (n - 1) / 2 - 1] == n - 1);
  std::vector<int32_t> rs_in(n * 2, me), rs_out(2);
  pg->reduceScatter(rs_in.data(), rs_out.data(), 2, DType::i32)->wait();
  WORKER_CHECK(rs_out[1] == n * (n - 1) / 2);
  std::vector<int32_t> a_in(n), a_out(n);
  std::iota(a_in.begin(), a_in.end(), me * 100);
  pg->alltoall(a_in.data(), a_out.data(), 1, DType::i32)->wait();
  WORKER_CHECK(a_out[n - 1] == (n - 1) * 100 + me);
  if (me == 0) {
    int32_t x = 77;
    pg->send(&x, 1, DType::i32, 2, {.tag = 3})->wait();
  } else if (me == 2) {
    int32_t x = 0;
    pg->recv(&x, 1, DType::i32, 0, {.tag = 3})->wait();
    WORKER_CHECK(x == 77);
  }
  pg->barrier()->wait();
  // Different collectives in the same slot: every rank gets an error saying so.
  float v = 1.0f;
  try {
    if (me == 0) {
      pg->allreduce(&v, 1, DType::f32)->wait();
    } else {
      pg->broadcast(&v, 1, DType::f32)->wait();
    }
    WORKER_CHECK(false);
  } catch (const PeerError& e) {
    WORKER_CHECK(std::string(e.what()).find("different collectives") != std::string::npos);
  }
  std::printf("mpi worker rank %d of %d ok\n", me, n);
  std::fflush(stdout);
  return 0;
}

// Rank 1 never joins the allreduce (it sleeps far past the deadline): rank 0's op times out and
// rank 0 exits with an error, which must end the job (its pending request kept MPI_Finalize, run
// at exit, waiting for rank 1 forever).
int mpiTimeoutWorker() {
  auto pg = MpiProcessGroup::createWorld({.timeout = std::chrono::seconds(2)});
  if (pg->rank() == 1) {
    ::sleep(100);
    return 0;
  }
  float v = 1.0f;
  try {
    pg->allreduce(&v, 1, DType::f32)->wait();
  } catch (const TimeoutError& e) {
    std::fprintf(stderr, "rank 0: %s\n", e.what());
    return 3;
  }
  return 1;
}

const int kMpiWorkerHook = [] {
  const char* mode = std::getenv("LOCKSTEP_COMM_TEST_MPI_WORKER");
  if (mode == nullptr) return 0;
  int rc = 1;
  try {
    rc = std::string(mode) == "timeout" ? mpiTimeoutWorker() : mpiWorker();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi worker: %s\n", e.what());
  }
  std::exit(rc);
}();

TEST(Mpi, three_ranks_under_mpirun) {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "mpirun not installed";
  char self[4096] = {};
  ASSERT_GT(::readlink("/proc/self/exe", self, sizeof(self) - 1), 0);
  std::string cmd = std::string(
                        "LOCKSTEP_COMM_TEST_MPI_WORKER=1 OMPI_MCA_btl_vader_single_copy_mechanism=none "
                        "timeout 120 mpirun -np 3 --allow-run-as-root --oversubscribe ") +
                    self + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string output;
  std::array<char, 4096> buf;
  while (size_t k = std::fread(buf.data(), 1, buf.size(), p)) output.append(buf.data(), k);
  int status = ::pclose(p);
  EXPECT_EQ(status, 0) << output;
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(output.find("mpi worker rank " + std::to_string(r) + " of 3 ok"), std::string::npos) << output;
  }
  (void)kMpiWorkerHook;
}

TEST(Mpi, a_rank_whose_op_timed_out_ends_the_job_instead_of_hanging_in_finalize) {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "mpirun not installed";
  char self[4096] = {};
  ASSERT_GT(::readlink("/proc/self/exe", self, sizeof(self) - 1), 0);
  const std::string cmd =
      std::string(
          "LOCKSTEP_COMM_TEST_MPI_WORKER=timeout OMPI_MCA_btl_vader_single_copy_mechanism=none "
          "timeout 90 mpirun -np 2 --allow-run-as-root --oversubscribe ") +
      self + " 2>&1";
  const auto start = std::chrono::steady_clock::now();
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string output;
  std::array<char, 4096> buf;
  while (size_t k = std::fread(buf.data(), 1, buf.size(), p)) output.append(buf.data(), k);
  const int status = ::pclose(p);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(status, 0) << output;
  EXPECT_NE(output.find("rank 0: allreduce #"), std::string::npos) << output;
  EXPECT_NE(output.find("timed out after 2000 ms"), std::string::npos) << output;
  // Ended by mpirun once rank 0 left, not by rank 1 waking after 100 s (or `timeout` after 90 s).
  EXPECT_LT(seconds, 60.0) << output;
}

}  // namespace
}  // namespace lockstep::comm
