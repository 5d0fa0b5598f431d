// The CUDA SGD and Adam/AdamW updates beyond gpu_ops_test.cpp's table (every option combination,
// f32 and f64, one span): many spans in one launch (spans past one launch's limits, mixed dtypes,
// empty spans), bitwise the single-span steps, and bad spans refused before any step. Skips without
// a GPU.
#include <gtest/gtest.h>

#include "gpu_compare.h"
#include "lockstep/kernels.h"

using namespace lockstep;
using lockstep::testing::gpu;
using lockstep::testing::hostRandom;

namespace {

// The parameter and its state on the host and on the GPU.
struct Buffers {
  std::vector<Tensor> host, dev;  // param, grad, then the optimizer's state buffers
  Buffers(int64_t n, DType t, int nbuf, uint64_t seed) {
    for (int k = 0; k < nbuf; ++k) {
      // exp_avg_sq and max_exp_avg_sq must be >= 0; the rest any sign.
      Tensor h = k >= 3 ? hostRandom({n}, t, seed + k, 0.0, 0.01) : hostRandom({n}, t, seed + k);
      host.push_back(h);
      dev.push_back(gpu(h));
    }
  }
  void* h(int k) const { return host[k].dataPtr(); }
  void* d(int k) const { return dev[k].devicePtr(); }
  void expectEqual(const std::string& what) const {
    for (size_t k = 0; k < host.size(); ++k) {
      // Bitwise: the same IEEE operations in the same order.
      EXPECT_EQ(dev[k].toVector<double>(), host[k].toVector<double>()) << what << " buffer " << k;
    }
  }
};

kernels::SgdSpan sgdSpan(const Buffers& b, bool on_gpu) {
  kernels::SgdSpan s;
  s.param = on_gpu ? b.d(0) : b.h(0);
  s.grad = on_gpu ? b.d(1) : b.h(1);
  s.momentum_buffer = on_gpu ? b.d(2) : b.h(2);
  s.numel = b.host[0].numel();
  s.dtype = b.host[0].dtype();
  s.device = on_gpu ? Device::cuda(0) : Device::cpu();
  return s;
}

kernels::AdamSpan adamSpan(const Buffers& b, bool on_gpu) {
  kernels::AdamSpan s;
  s.param = on_gpu ? b.d(0) : b.h(0);
  s.grad = on_gpu ? b.d(1) : b.h(1);
  s.exp_avg = on_gpu ? b.d(2) : b.h(2);
  s.exp_avg_sq = on_gpu ? b.d(3) : b.h(3);
  s.max_exp_avg_sq = on_gpu ? b.d(4) : b.h(4);
  s.numel = b.host[0].numel();
  s.dtype = b.host[0].dtype();
  s.device = on_gpu ? Device::cuda(0) : Device::cpu();
  return s;
}

}  // namespace

TEST(GpuOptimizer, many_spans_in_one_launch_equal_single_span_steps) {
  LOCKSTEP_REQUIRE_GPU();
  // 40 spans (past one launch's 32), one of 5M elements (past its block list), empty ones, both dtypes.
  std::vector<Buffers> sgd_bufs, adam_bufs;
  for (int i = 0; i < 40; ++i) {
    const int64_t n = i == 7 ? 5000000 : i % 9 == 0 ? 0 : 17 * i + 1;
    const DType t = i % 4 == 3 ? DType::f64 : DType::f32;
    sgd_bufs.emplace_back(n, t, 3, 100 + i);
    adam_bufs.emplace_back(n, t, 5, 200 + i);
  }
  kernels::SgdParams sp;
  sp.momentum = 0.9;
  sp.weight_decay = 1e-4;
  kernels::AdamParams ap;
  ap.weight_decay = 0.01;
  ap.decoupled_weight_decay = true;
  for (int step = 1; step <= 2; ++step) {
    sp.first_step = step == 1;
    ap.step = step;
    std::vector<kernels::SgdSpan> sgd_dev;
    std::vector<kernels::AdamSpan> adam_dev;
    for (const Buffers& b : sgd_bufs) {
      sgd_dev.push_back(sgdSpan(b, true));
      kernels::sgdStep(sgdSpan(b, false), sp);
    }
    for (const Buffers& b : adam_bufs) {
      adam_dev.push_back(adamSpan(b, true));
      kernels::adamStep(adamSpan(b, false), ap);
    }
    kernels::sgdStepMany(sgd_dev, sp);
    kernels::adamStepMany(adam_dev, ap);
  }
  for (size_t i = 0; i < sgd_bufs.size(); ++i) {
    sgd_bufs[i].expectEqual("sgd span " + std::to_string(i));
    adam_bufs[i].expectEqual("adam span " + std::to_string(i));
  }
}

TEST(GpuOptimizer, rejects_bad_spans_before_stepping_any) {
  LOCKSTEP_REQUIRE_GPU();
  Buffers b(10, DType::f32, 5, 1);
  kernels::AdamSpan good = adamSpan(b, true), bad = adamSpan(b, true);
  bad.exp_avg = nullptr;
  const std::vector<double> before = b.dev[0].toVector<double>();
  std::vector<kernels::AdamSpan> spans{good, bad};
  EXPECT_THROW(kernels::adamStepMany(spans, kernels::AdamParams{}), ValueError);
  EXPECT_EQ(b.dev[0].toVector<double>(), before);
  // f32 Adam states beside bf16 parameters are the host's (ZeRO-Offload's CPU Adam) alone.
  Buffers h(10, DType::bf16, 5, 1);
  kernels::AdamSpan mixed = adamSpan(h, true);
  mixed.state_dtype = DType::f32;
  EXPECT_THROW(kernels::adamStep(mixed, kernels::AdamParams{}), NotSupportedError);
}
