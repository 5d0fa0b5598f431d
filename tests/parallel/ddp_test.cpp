// DistributedDataParallel with ranks as threads over one HashStore (shm backend), checked against a
// single process that sees the whole batch.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <thread>

#include "lockstep/autograd.h"
#include "lockstep/comm/init.h"
#include "lockstep/comm/store/hash_store.h"
#include "lockstep/nn.h"
#include "lockstep/optim.h"
#include "lockstep/parallel.h"
#include "parallel/thread_ranks.h"

using namespace lockstep;
using autograd::Variable;
using parallel::DistributedDataParallel;
using parallel::DistributedDataParallelOptions;

namespace {

constexpr int64_t kIn = 6, kClasses = 3;

std::shared_ptr<nn::Module> makeNet(uint64_t seed, int64_t hidden = 8) {
  Generator g(seed);
  nn::ModelOptions o;
  o.in_features = kIn;
  o.out_features = kClasses;
  o.hidden = {hidden, hidden};
  o.generator = &g;
  return nn::makeModel("mlp", o);
}

// The global batch of a step: rows [r*b, (r+1)*b) belong to rank r.
std::pair<Tensor, Tensor> globalBatch(int step, int64_t rows) {
  Tensor x = Tensor::empty({rows, kIn});
  Generator(1000 + step).uniform(x, -1, 1);
  Tensor y = Tensor::empty({rows}, DType::i64);
  Generator g(2000 + step);
  for (int64_t i = 0; i < rows; ++i) y.data<int64_t>()[i] = static_cast<int64_t>(g.nextBelow(kClasses));
  return {x, y};
}

std::unique_ptr<optim::Optimizer> makeOptimizer(const std::string& kind, std::vector<Variable> params) {
  if (kind == "sgd") {
    optim::SGDOptions o;
    o.lr = 0.1;
    o.momentum = 0.9;
    return std::make_unique<optim::SGD>(std::move(params), o);
  }
  optim::AdamOptions o;
  o.lr = 0.01;
  return std::make_unique<optim::Adam>(std::move(params), o);
}

Variable lossOf(nn::Module& m, const Tensor& x, const Tensor& y) {
  return autograd::crossEntropy(m.forward(Variable(x)), y);
}

void runRanks(int world, const std::function<void(int, std::shared_ptr<comm::ProcessGroup>)>& fn) {
  lockstep::testing::runThreadRanks(world, fn);
}

double maxRelDiff(const Tensor& a, const Tensor& b) {
  auto va = a.toVector<double>(), vb = b.toVector<double>();
  double diff = 0, scale = 1e-12;
  for (size_t i = 0; i < va.size(); ++i) {
    diff = std::max(diff, std::abs(va[i] - vb[i]));
    scale = std::max(scale, std::abs(vb[i]));
  }
  return diff / scale;
}

void expectSameParams(nn::Module& got, nn::Module& want, double tol) {
  auto g = got.namedParameters(), w = want.namedParameters();
  ASSERT_EQ(g.size(), w.size());
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_LE(maxRelDiff(g[i].second.tensor(), w[i].second.tensor()), tol) << g[i].first;
  }
}

void checkEquivalence(const std::string& opt_kind, int world,
                      const DistributedDataParallelOptions& ddp_opts = {}) {
  const int64_t b = 4;
  const int steps = 20;
  auto ref = makeNet(7);
  auto ref_opt = makeOptimizer(opt_kind, ref->parameters());
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = globalBatch(s, b * world);
    Variable loss = lossOf(*ref, x, y);
    ref_opt->zeroGrad();
    loss.backward();
    ref_opt->step();
  }
  std::mutex mu;
  runRanks(world, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    // Different seeds per rank: DDP's broadcast from rank 0 must make them equal.
    auto net = std::make_shared<DistributedDataParallel>(makeNet(7 + rank), pg, ddp_opts);
    auto opt = makeOptimizer(opt_kind, net->parameters());
    for (int s = 0; s < steps; ++s) {
      auto [x, y] = globalBatch(s, b * world);
      Variable loss = lossOf(*net, x.slice(rank * b, (rank + 1) * b), y.slice(rank * b, (rank + 1) * b));
      opt->zeroGrad(!ddp_opts.gradient_as_bucket_view);
      loss.backward();
      opt->step();
    }
    std::lock_guard<std::mutex> lock(mu);
    expectSameParams(net->module(), *ref, 1e-5);
  });
}

}  // namespace

TEST(DDP, matches_single_process_sgd_momentum) {
  for (int world : {1, 2, 3, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    checkEquivalence("sgd", world);
  }
}

TEST(DDP, matches_single_process_adam) {
  for (int world : {1, 2, 3, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    checkEquivalence("adam", world);
  }
}

TEST(DDP, gradient_as_bucket_view_matches_and_shares_storage) {
  DistributedDataParallelOptions o;
  o.gradient_as_bucket_view = true;
  checkEquivalence("sgd", 2, o);
  runRanks(2, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    DistributedDataParallel net(makeNet(1), pg, o);
    auto [x, y] = globalBatch(0, 8);
    lossOf(net, x.slice(rank * 4, rank * 4 + 4), y.slice(rank * 4, rank * 4 + 4)).backward();
    auto params = net.parameters();
    for (size_t i = 1; i < params.size(); ++i) {
      // Parameters of one bucket share one buffer.
      EXPECT_TRUE(params[i].grad().sharesStorage(params[0].grad()));
    }
  });
}

TEST(DDP, small_buckets_launch_during_backward) {
  DistributedDataParallelOptions o;
  o.first_bucket_mb = 1e-5;  // ~10 bytes: every parameter gets its own bucket
  o.bucket_cap_mb = 1e-5;
  checkEquivalence("sgd", 2, o);
  runRanks(2, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    DistributedDataParallel net(makeNet(1), pg, o);
    EXPECT_EQ(net.reducer().bucketAssignment().size(), net.parameters().size());
    auto [x, y] = globalBatch(0, 8);
    lossOf(net, x.slice(rank * 4, rank * 4 + 4), y.slice(rank * 4, rank * 4 + 4)).backward();
    // Buckets went out while backward was still producing gradients, in bucket order.
    EXPECT_GT(net.reducer().launchedBeforeLastReady(), 0);
    const auto& order = net.reducer().lastLaunchOrder();
    for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(order[i], static_cast<int>(i));
  });
}

TEST(DDP, timings_name_the_straggler_and_skip_no_sync) {
  // Rank 1 dawdles 100 ms before each backward: rank 0's backward waits for it in the allreduce.
  std::mutex mu;
  std::vector<parallel::ReducerTimings> got(2);
  runRanks(2, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    DistributedDataParallel net(makeNet(1), pg);
    auto [x, y] = globalBatch(0, 8);
    for (int s = 0; s < 4; ++s) {
      Variable loss = lossOf(net, x.slice(rank * 4, rank * 4 + 4), y.slice(rank * 4, rank * 4 + 4));
      if (s == 3) {  // not synchronized: not counted
        auto guard = net.noSync();
        loss.backward();
        continue;
      }
      if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      loss.backward();
    }
    std::lock_guard<std::mutex> lock(mu);
    got[rank] = net.timings();
  });
  for (int r = 0; r < 2; ++r) {
    const auto& t = got[r];
    SCOPED_TRACE("rank " + std::to_string(r) + ": " + parallel::formatTimings(t));
    EXPECT_EQ(t.iterations, 3);
    EXPECT_GT(t.forward_compute_ms, 0);
    EXPECT_GE(t.backward_compute_ms, 0);
    EXPECT_GE(t.backward_comm_ms, t.backward_comm_wait_ms);
    EXPECT_LE(t.backward_compute_comm_overlap_ms, t.backward_comm_ms);
    EXPECT_LE(t.backward_compute_comm_overlap_ms, t.backward_compute_ms);
  }
  EXPECT_GE(got[0].backward_comm_wait_ms, 50);
  EXPECT_LT(got[1].backward_comm_wait_ms, got[0].backward_comm_wait_ms);
}

TEST(DDP, no_sync_accumulation_equals_larger_batch) {
  const int world = 2, k = 3;
  const int64_t b = 4;
  auto ref = makeNet(3);
  for (int j = 0; j < k; ++j) {
    auto [x, y] = globalBatch(j, b * world);
    lossOf(*ref, x, y).backward();
  }
  std::mutex mu;
  runRanks(world, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    DistributedDataParallel net(makeNet(3), pg);
    for (int j = 0; j < k; ++j) {
      auto [x, y] = globalBatch(j, b * world);
      Variable loss = lossOf(net, x.slice(rank * b, (rank + 1) * b), y.slice(rank * b, (rank + 1) * b));
      if (j < k - 1) {
        auto guard = net.noSync();
        loss.backward();
      } else {
        loss.backward();
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    auto got = net.module().namedParameters(), want = ref->namedParameters();
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_LE(maxRelDiff(got[i].second.grad(), want[i].second.grad()), 1e-5) << got[i].first;
    }
  });
}

namespace {
// Two heads; forward uses only the first, so "unused" never gets a gradient.
class TwoHeads : public nn::Module {
 public:
  TwoHeads() : nn::Module("TwoHeads") {
    Generator g(5);
    nn::LinearOptions o;
    o.in_features = kIn;
    o.out_features = kClasses;
    o.generator = &g;
    used_ = registerModule("used", std::make_shared<nn::Linear>(o));
    unused_ = registerModule("unused", std::make_shared<nn::Linear>(o));
  }
  Variable forward(const Variable& x) override { return used_->forward(x); }

 private:
  std::shared_ptr<nn::Linear> used_, unused_;
};
}  // namespace

TEST(DDP, unused_parameters_are_named_without_find_unused) {
  runRanks(2, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    DistributedDataParallel net(std::make_shared<TwoHeads>(), pg);
    auto [x, y] = globalBatch(0, 8);
    lossOf(net, x, y).backward();
    try {
      lossOf(net, x, y);
      FAIL() << "expected an error naming the unused parameters";
    } catch (const ValueError& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("unused.weight"), std::string::npos) << msg;
      EXPECT_NE(msg.find("find_unused_parameters"), std::string::npos) << msg;
    }
  });
}

TEST(DDP, find_unused_parameters_completes_reduction) {
  DistributedDataParallelOptions o;
  o.find_unused_parameters = true;
  runRanks(2, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    DistributedDataParallel net(std::make_shared<TwoHeads>(), pg, o);
    for (int s = 0; s < 3; ++s) {
      auto [x, y] = globalBatch(s, 8);
      net.zeroGrad();
      lossOf(net, x.slice(rank * 4, rank * 4 + 4), y.slice(rank * 4, rank * 4 + 4)).backward();
    }
    for (auto& [name, p] : net.namedParameters()) {
      ASSERT_TRUE(p.hasGrad()) << name;
      if (name.find("unused") != std::string::npos) {
        for (float v : p.grad().toVector<float>()) EXPECT_EQ(v, 0.0f) << name;
      }
    }
  });
}

TEST(DDP, models_that_differ_across_ranks_are_an_error) {
  runRanks(2, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    try {
      DistributedDataParallel net(makeNet(1, rank == 0 ? 8 : 9), pg);
      FAIL() << "expected an error";
    } catch (const ValueError& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("differs across ranks"), std::string::npos) << msg;
      EXPECT_NE(msg.find("rank 1"), std::string::npos) << msg;
    }
  });
}

TEST(DDP, noop_hook_leaves_each_rank_its_local_gradients) {
  // PyTorch's debugging noop_hook: no communication, so each rank keeps the gradient of its own
  // slice of the batch (the measurement of synchronisation's cost in bench/ddp.bench.sh).
  std::vector<std::vector<float>> grads(2), local(2);
  runRanks(2, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    DistributedDataParallelOptions o;
    o.comm_hook = "noop";
    DistributedDataParallel net(makeNet(1), pg, o);
    auto alone = makeNet(1);
    auto [x, y] = globalBatch(0, 8);
    lossOf(net, x.slice(rank * 4, rank * 4 + 4), y.slice(rank * 4, rank * 4 + 4)).backward();
    lossOf(*alone, x.slice(rank * 4, rank * 4 + 4), y.slice(rank * 4, rank * 4 + 4)).backward();
    grads[rank] = net.parameters()[0].grad().toVector<float>();
    local[rank] = alone->parameters()[0].grad().toVector<float>();
    EXPECT_EQ(net.timings().iterations, 1);
  });
  EXPECT_EQ(grads[0], local[0]);
  EXPECT_EQ(grads[1], local[1]);
  EXPECT_NE(grads[0], grads[1]);
  try {
    parallel::makeCommHook("no_such_hook");
    FAIL() << "expected an error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown comm_hook 'no_such_hook'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("noop"), std::string::npos) << e.what();
  }
}

TEST(DDP, fp16_and_bf16_compression_stay_close) {
  for (const char* hook : {"fp16_compress", "bf16_compress"}) {
    SCOPED_TRACE(hook);
    std::vector<std::vector<float>> grads(2), exact(2);
    runRanks(2, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
      DistributedDataParallelOptions o;
      o.comm_hook = hook;
      DistributedDataParallel compressed(makeNet(1), pg, o);
      DistributedDataParallel plain(makeNet(1), pg);
      auto [x, y] = globalBatch(0, 8);
      lossOf(compressed, x.slice(rank * 4, rank * 4 + 4), y.slice(rank * 4, rank * 4 + 4)).backward();
      lossOf(plain, x.slice(rank * 4, rank * 4 + 4), y.slice(rank * 4, rank * 4 + 4)).backward();
      grads[rank] = compressed.parameters()[0].grad().toVector<float>();
      exact[rank] = plain.parameters()[0].grad().toVector<float>();
    });
    double tol = std::string(hook) == "fp16_compress" ? 2e-3 : 2e-2;
    for (size_t i = 0; i < exact[0].size(); ++i) {
      EXPECT_NEAR(grads[0][i], exact[0][i], tol * (1 + std::abs(exact[0][i])));
      EXPECT_EQ(grads[0][i], grads[1][i]);  // every rank ends with the same gradient
    }
  }
}
