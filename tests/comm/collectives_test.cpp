// Every collective of every backend against a reference, ranks as threads:
// backend x world size (1, 2, 3, 4, 7) x count (0, 1, odd) x dtype x reduce op; 1M elements for
// allreduce/allgather on a subset, 300K per rank for reduce_scatter on every world size.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <type_traits>

#include "comm/comm_test_util.h"
#include "lockstep/util/error.h"

namespace lockstep::comm {
namespace {

using testing::withGroups;

const std::vector<DType> kAllDTypes = {DType::f32, DType::f64, DType::bf16, DType::f16,
                                       DType::i32, DType::i64, DType::u8};
const std::vector<ReduceOp> kAllOps = {ReduceOp::sum, ReduceOp::avg, ReduceOp::min, ReduceOp::max,
                                       ReduceOp::product};
const std::vector<size_t> kCounts = {0, 1, 37};

// Small integers: exact in every dtype, and products stay exact (powers of two).
double value(int rank, size_t i, ReduceOp op) {
  if (op == ReduceOp::product) return 1.0 + static_cast<double>((rank + i) % 2);
  return static_cast<double>((rank * 3 + i) % 9 + 1);
}

template <typename T>
using ComputeT = std::conditional_t<std::is_same_v<T, double>, double,
                                    std::conditional_t<std::is_integral_v<T>, int64_t, float>>;

template <typename T>
double toDouble(T v) {
  return static_cast<double>(static_cast<ComputeT<T>>(v));
}
template <typename T>
T fromDouble(double v) {
  return T(static_cast<ComputeT<T>>(v));
}

struct Buf {
  DType dtype;
  std::vector<uint8_t> bytes;
  Buf(DType t, size_t n) : dtype(t), bytes(n * dtypeSize(t) + 1) {}  // +1: data() never null
  size_t count() const { return (bytes.size() - 1) / dtypeSize(dtype); }
  void* data() { return bytes.data(); }
  double get(size_t i) const {
    return visitDType(dtype, [&](auto tag) {
      using T = decltype(tag);
      return toDouble(reinterpret_cast<const T*>(bytes.data())[i]);
    });
  }
  void set(size_t i, double v) {
    visitDType(dtype, [&](auto tag) {
      using T = decltype(tag);
      reinterpret_cast<T*>(bytes.data())[i] = fromDouble<T>(v);
    });
  }
  // The reference result of op over world ranks, rounded as the backends round it.
  static double expected(DType dtype, ReduceOp op, int world, size_t i) {
    double acc = value(0, i, op);
    for (int r = 1; r < world; ++r) {
      double v = value(r, i, op);
      switch (op) {
        case ReduceOp::sum:
        case ReduceOp::avg:
          acc += v;
          break;
        case ReduceOp::product:
          acc *= v;
          break;
        case ReduceOp::min:
          acc = std::min(acc, v);
          break;
        case ReduceOp::max:
          acc = std::max(acc, v);
          break;
      }
    }
    if (op != ReduceOp::avg) return acc;
    return visitDType(dtype, [&](auto tag) {
      using T = decltype(tag);
      using C = ComputeT<T>;
      return toDouble(T(static_cast<C>(static_cast<C>(acc) / static_cast<C>(world))));
    });
  }
};

using Param = std::tuple<std::string, int>;

class CollectivesTest : public ::testing::TestWithParam<Param> {
 protected:
  std::string backend() const { return std::get<0>(GetParam()); }
  int world() const { return std::get<1>(GetParam()); }
};

TEST_P(CollectivesTest, allreduce_every_d_type_and_op) {
  const int world = this->world();
  withGroups(backend(), world, [&](ProcessGroup& pg) {
    for (DType dt : kAllDTypes) {
      for (ReduceOp op : kAllOps) {
        for (size_t n : kCounts) {
          Buf b(dt, n);
          for (size_t i = 0; i < n; ++i) b.set(i, value(pg.rank(), i, op));
          pg.allreduce(b.data(), n, dt, {.op = op})->wait();
          for (size_t i = 0; i < n; ++i) {
            ASSERT_EQ(b.get(i), Buf::expected(dt, op, world, i))
                << dtypeName(dt) << " " << reduceOpName(op) << " n=" << n << " i=" << i;
          }
        }
      }
    }
  });
}

TEST_P(CollectivesTest, allreduce_one_million) {
  const int world = this->world();
  if (world == 4 || (backend() == "gloo" && world == 7)) GTEST_SKIP() << "large counts on a subset only";
  withGroups(backend(), world, [&](ProcessGroup& pg) {
    const size_t n = 1'000'003;
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
      std::vector<float> v(n);
      for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(value(pg.rank(), i, op));
      pg.allreduce(v.data(), n, DType::f32, {.op = op})->wait();
      for (size_t i = 0; i < n; i += 997) ASSERT_EQ(v[i], Buf::expected(DType::f32, op, world, i)) << i;
      ASSERT_EQ(v[n - 1], Buf::expected(DType::f32, op, world, n - 1));
    }
  });
}

TEST_P(CollectivesTest, broadcast_from_every_root) {
  withGroups(backend(), world(), [&](ProcessGroup& pg) {
    for (DType dt : {DType::f32, DType::i64, DType::bf16}) {
      for (size_t n : {size_t{0}, size_t{1}, size_t{37}, size_t{40000}}) {
        for (int root = 0; root < pg.size(); ++root) {
          Buf b(dt, n);
          for (size_t i = 0; i < n; ++i) b.set(i, pg.rank() == root ? value(root, i, ReduceOp::sum) : -1);
          pg.broadcast(b.data(), n, dt, {.root = root})->wait();
          for (size_t i = 0; i < n; ++i)
            ASSERT_EQ(b.get(i), value(root, i, ReduceOp::sum)) << root << " " << i;
        }
      }
    }
  });
}

TEST_P(CollectivesTest, reduce_to_root) {
  const int world = this->world();
  withGroups(backend(), world, [&](ProcessGroup& pg) {
    for (ReduceOp op : kAllOps) {
      for (int root : {0, pg.size() - 1}) {
        Buf b(DType::i32, 37);
        for (size_t i = 0; i < 37; ++i) b.set(i, value(pg.rank(), i, op));
        pg.reduce(b.data(), 37, DType::i32, {.op = op, .root = root})->wait();
        if (pg.rank() != root) continue;
        for (size_t i = 0; i < 37; ++i) ASSERT_EQ(b.get(i), Buf::expected(DType::i32, op, world, i));
      }
    }
  });
}

TEST_P(CollectivesTest, allgather_even_and_uneven) {
  withGroups(backend(), world(), [&](ProcessGroup& pg) {
    const int w = pg.size();
    for (DType dt : {DType::f32, DType::u8, DType::f16}) {
      for (size_t n : kCounts) {
        Buf in(dt, n), out(dt, n * w);
        for (size_t i = 0; i < n; ++i) in.set(i, value(pg.rank(), i, ReduceOp::sum));
        pg.allgather(in.data(), out.data(), n, dt)->wait();
        for (int r = 0; r < w; ++r)
          for (size_t i = 0; i < n; ++i) ASSERT_EQ(out.get(r * n + i), value(r, i, ReduceOp::sum));
      }
      // Uneven: rank r contributes (r * 5) % 7 elements, some zero.
      std::vector<size_t> counts(w);
      for (int r = 0; r < w; ++r) counts[r] = static_cast<size_t>((r * 5) % 7);
      size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
      Buf in(dt, counts[pg.rank()]), out(dt, total);
      for (size_t i = 0; i < counts[pg.rank()]; ++i) in.set(i, value(pg.rank(), i, ReduceOp::sum));
      pg.allgatherv(in.data(), out.data(), counts, dt)->wait();
      size_t pos = 0;
      for (int r = 0; r < w; ++r)
        for (size_t i = 0; i < counts[r]; ++i) ASSERT_EQ(out.get(pos++), value(r, i, ReduceOp::sum));
    }
  });
}

TEST_P(CollectivesTest, allgather_one_million) {
  if (world() != 2 && world() != 3) GTEST_SKIP() << "large counts on a subset only";
  withGroups(backend(), world(), [&](ProcessGroup& pg) {
    const size_t n = 1'000'001;
    std::vector<int32_t> in(n), out(n * pg.size());
    for (size_t i = 0; i < n; ++i) in[i] = static_cast<int32_t>(i * 7 + pg.rank());
    pg.allgather(in.data(), out.data(), n, DType::i32)->wait();
    for (int r = 0; r < pg.size(); ++r)
      for (size_t i = 0; i < n; i += 101) ASSERT_EQ(out[r * n + i], static_cast<int32_t>(i * 7 + r));
  });
}

// out on rank r is block r of op over every rank's input; the reference is computed here, per
// element, from the inputs (value()), not by another collective.
void checkReduceScatter(ProcessGroup& pg, DType dt, ReduceOp op, size_t n, size_t stride = 1) {
  const int world = pg.size();
  Buf in(dt, n * world), out(dt, n);
  for (size_t i = 0; i < n * world; ++i) in.set(i, value(pg.rank(), i, op));
  for (size_t i = 0; i < n; ++i) out.set(i, -1);
  pg.reduceScatter(in.data(), out.data(), n, dt, {.op = op})->wait();
  std::vector<size_t> checked;
  for (size_t i = 0; i < n; i += stride) checked.push_back(i);
  if (n > 0) checked.push_back(n - 1);
  for (size_t i : checked) {
    ASSERT_EQ(out.get(i), Buf::expected(dt, op, world, pg.rank() * n + i))
        << dtypeName(dt) << " " << reduceOpName(op) << " n=" << n << " i=" << i;
  }
  // The input is left as it was.
  for (size_t i = 0; i < n * world; i += stride) ASSERT_EQ(in.get(i), value(pg.rank(), i, op)) << i;
}

TEST_P(CollectivesTest, reduce_scatter_every_dtype_and_op) {
  withGroups(backend(), world(), [&](ProcessGroup& pg) {
    for (DType dt : kAllDTypes) {
      for (ReduceOp op : kAllOps) {
        for (size_t n : kCounts) checkReduceScatter(pg, dt, op, n);
      }
    }
  });
}

TEST_P(CollectivesTest, reduce_scatter_large_counts) {
  // 300'007 f32 per block: many shm blocks (64 KiB in these tests) and two gloo ring segments.
  withGroups(backend(), world(), [&](ProcessGroup& pg) {
    checkReduceScatter(pg, DType::f32, ReduceOp::sum, 300'007, 7);
    checkReduceScatter(pg, DType::bf16, ReduceOp::avg, 300'007, 7);
    checkReduceScatter(pg, DType::i64, ReduceOp::max, 100'003, 7);
  });
}

TEST_P(CollectivesTest, gather_scatter_alltoall) {
  withGroups(backend(), world(), [&](ProcessGroup& pg) {
    const int w = pg.size(), me = pg.rank();
    for (size_t n : kCounts) {
      for (int root : {0, w - 1}) {
        Buf in(DType::i64, n), out(DType::i64, n * w);
        for (size_t i = 0; i < n; ++i) in.set(i, me * 100 + static_cast<double>(i));
        pg.gather(in.data(), out.data(), n, DType::i64, {.root = root})->wait();
        if (me == root) {
          for (int r = 0; r < w; ++r) {
            for (size_t i = 0; i < n; ++i) ASSERT_EQ(out.get(r * n + i), r * 100 + static_cast<double>(i));
          }
        }

        Buf all(DType::i64, n * w), mine(DType::i64, n);
        for (size_t i = 0; i < n * w; ++i) all.set(i, me == root ? static_cast<double>(i) : -1);
        pg.scatter(all.data(), mine.data(), n, DType::i64, {.root = root})->wait();
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(mine.get(i), static_cast<double>(me * n + i));
      }
      Buf in(DType::f32, n * w), out(DType::f32, n * w);
      for (int j = 0; j < w; ++j)
        for (size_t i = 0; i < n; ++i) in.set(j * n + i, me * 1000 + j * 10 + static_cast<double>(i));
      pg.alltoall(in.data(), out.data(), n, DType::f32)->wait();
      for (int j = 0; j < w; ++j)
        for (size_t i = 0; i < n; ++i)
          ASSERT_EQ(out.get(j * n + i), j * 1000 + me * 10 + static_cast<double>(i));
    }
    pg.barrier()->wait();
  });
}

TEST_P(CollectivesTest, many_ops_in_flight_complete_in_order) {
  withGroups(backend(), world(), [&](ProcessGroup& pg) {
    std::vector<std::vector<int32_t>> bufs(20, std::vector<int32_t>(100, pg.rank() + 1));
    std::vector<std::shared_ptr<Work>> works;
    for (auto& b : bufs) works.push_back(pg.allreduce(b.data(), b.size(), DType::i32));
    works.back()->wait();
    for (auto& w : works) EXPECT_TRUE(w->isCompleted());  // issue order
    int64_t sum = pg.size() * (pg.size() + 1) / 2;
    for (auto& b : bufs) ASSERT_EQ(b[99], sum);
    EXPECT_EQ(pg.sequenceNumber(), 20u);
  });
}

TEST_P(CollectivesTest, deferred_allreduce_runs_when_waited_on) {
  withGroups(backend(), world(), [&](ProcessGroup& pg) {
    const int32_t sum = pg.size() * (pg.size() + 1) / 2;
    AllreduceOptions deferred;
    deferred.defer = true;
    // Deferred ops mixed with ordinary ones still complete in issue order.
    std::vector<std::vector<int32_t>> bufs(6, std::vector<int32_t>(1000, pg.rank() + 1));
    std::vector<std::shared_ptr<Work>> works;
    for (size_t i = 0; i < bufs.size(); ++i) {
      works.push_back(
          pg.allreduce(bufs[i].data(), bufs[i].size(), DType::i32, i % 2 ? deferred : AllreduceOptions{}));
    }
    works.back()->wait();
    for (auto& w : works) EXPECT_TRUE(w->isCompleted());
    for (auto& b : bufs) ASSERT_EQ(b[999], sum);
    // A wait with a limit of its own does not run ops itself: the worker must be woken for it.
    int32_t v = pg.rank() + 1;
    auto w = pg.allreduce(&v, 1, DType::i32, deferred);
    w->wait(std::chrono::seconds(20));
    EXPECT_EQ(v, sum);
  });
}

TEST_P(CollectivesTest, subgroups) {
  if (world() < 3) GTEST_SKIP() << "needs 3 ranks";
  withGroups(backend(), world(), [&](ProcessGroup& pg) {
    std::vector<int> odd;
    for (int r = 1; r < pg.size(); r += 2) odd.push_back(r);
    auto sub = pg.newGroup(odd);
    ASSERT_EQ(sub != nullptr, pg.rank() % 2 == 1);
    if (sub) {
      EXPECT_EQ(sub->size(), static_cast<int>(odd.size()));
      EXPECT_EQ(sub->rank(), pg.rank() / 2);
      int32_t v = pg.rank();
      sub->allreduce(&v, 1, DType::i32)->wait();
      EXPECT_EQ(v, std::accumulate(odd.begin(), odd.end(), 0));
    }
    int32_t all = 1;
    pg.allreduce(&all, 1, DType::i32)->wait();  // parent still works
    EXPECT_EQ(all, pg.size());
  });
}

std::string paramName(const ::testing::TestParamInfo<Param>& info) {
  return std::get<0>(info.param) + "_world" + std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Backends, CollectivesTest,
                         ::testing::Combine(::testing::Values("shm", "gloo"),
                                            ::testing::Values(1, 2, 3, 4, 7)),
                         paramName);

}  // namespace
}  // namespace lockstep::comm
