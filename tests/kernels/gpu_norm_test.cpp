// The joint norm and the clip of many tensors on a GPU (kernels/norm.h) against the host: hundreds
// of tensors (several launches of each pass), tensors of several chunks, empty ones, non-dense views,
// every floating dtype, p = 2, 1.5 and infinity; the result is bitwise the same run after run and
// the clip reads its coefficient on the device. Evaluation's correct count (kernels/metrics.h)
// against the host. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "gpu_compare.h"
#include "lockstep/kernels.h"
#include "lockstep/kernels/metrics.h"
#include "lockstep/kernels/norm.h"

using namespace lockstep;
using lockstep::testing::gpu;
using lockstep::testing::gpuMatches;
using lockstep::testing::hostRandom;
using lockstep::testing::kExact;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// 300 tensors (more than one launch of every pass): sizes 0, 1, odd ones, one of 3 chunks and a
// bit (200,003 elements), a channels-last one and a column slice (not dense).
std::vector<Tensor> hostTensors(DType t, uint64_t seed) {
  std::vector<Tensor> xs;
  for (int i = 0; i < 300; ++i) {
    if (i == 7) {
      xs.push_back(hostRandom({200003}, t, seed + i));
    } else if (i == 11) {
      xs.push_back(Tensor::empty({0, 4}, t));
    } else if (i == 13) {
      xs.push_back(hostRandom({2, 3, 5, 7}, t, seed + i).toFormat(MemoryFormat::channels_last));
    } else if (i == 17) {
      xs.push_back(hostRandom({70, 12}, t, seed + i).narrow(1, 0, 9));
    } else {
      xs.push_back(hostRandom({1 + (i * 37) % 1000}, t, seed + i));
    }
  }
  return xs;
}

std::vector<Tensor> toGpu(const std::vector<Tensor>& xs) {
  std::vector<Tensor> out;
  for (const Tensor& x : xs) {
    if (x.isDense()) {
      out.push_back(gpu(x));  // the same layout (channels-last stays so)
      continue;
    }
    // The same kind of view on the GPU: columns of a wider matrix.
    Tensor d = Tensor::empty({x.size(0), x.size(1) + 3}, x.dtype(), MemoryFormat::contiguous, Device::cuda(0))
                   .narrow(1, 0, x.size(1));
    d.copyFrom(x);
    out.push_back(d);
  }
  return out;
}

}  // namespace

TEST(GpuNorm, total_norm_matches_the_host_and_repeats_bitwise) {
  LOCKSTEP_REQUIRE_GPU();
  for (DType t : lockstep::testing::kFloatDTypes) {
    const std::vector<Tensor> host = hostTensors(t, 50);
    const std::vector<Tensor> dev = toGpu(host);
    ASSERT_FALSE(dev[17].isDense());
    for (double p : {2.0, 1.5, kInf}) {
      // The host computes any dtype's norm in f64 from the same values: the GPU differs from it by
      // the order of its f64 sums alone.
      const double want = kernels::totalNorm(host, p).item<double>();
      Tensor got = kernels::totalNorm(dev, p);
      ASSERT_TRUE(got.isCuda());
      EXPECT_EQ(got.dtype(), DType::f64);
      EXPECT_EQ(got.dim(), 0);
      const double g = got.item<double>();
      EXPECT_NEAR(g, want, 1e-12 * want) << dtypeName(t) << " p " << p;
      if (std::isinf(p)) {
        EXPECT_EQ(g, want) << dtypeName(t);  // a max has no order
      }
      for (int again = 0; again < 3; ++again) {
        EXPECT_EQ(kernels::totalNorm(dev, p).item<double>(), g) << dtypeName(t) << " p " << p;
      }
      EXPECT_NEAR(kernels::norm(dev[7], p), kernels::norm(host[7], p), 1e-12 * kernels::norm(host[7], p));
    }
  }
}

TEST(GpuNorm, max_norm_and_sums_carry_nan_and_inf) {
  LOCKSTEP_REQUIRE_GPU();
  for (DType t : {DType::f32, DType::bf16}) {
    std::vector<Tensor> host = {hostRandom({100000}, t, 1), hostRandom({33}, t, 2)};
    host[0].narrow(0, 70000, 1).fill(std::numeric_limits<double>::quiet_NaN());
    host[1].narrow(0, 0, 1).fill(std::numeric_limits<double>::quiet_NaN());
    std::vector<Tensor> dev = {gpu(host[0]), gpu(host[1])};
    // The inf-norm keeps a NaN, as torch's (and the host's) does.
    EXPECT_TRUE(std::isnan(kernels::totalNorm(host, kInf).item<double>()));
    EXPECT_TRUE(std::isnan(kernels::totalNorm(dev, kInf).item<double>()));
    EXPECT_TRUE(std::isnan(kernels::totalNorm(dev, 2.0).item<double>()));
    host[1].narrow(0, 0, 1).fill(kInf);
    dev[1] = gpu(host[1]);
    dev[0] = gpu(hostRandom({100000}, t, 1));
    EXPECT_EQ(kernels::totalNorm(dev, 2.0).item<double>(), kInf);
    EXPECT_EQ(kernels::totalNorm(dev, kInf).item<double>(), kInf);
  }
}

TEST(GpuNorm, clip_scales_as_the_host_with_the_coefficient_read_on_the_device) {
  LOCKSTEP_REQUIRE_GPU();
  for (DType t : {DType::f32, DType::f64}) {
    std::vector<Tensor> host = hostTensors(t, 80);
    std::vector<Tensor> dev = toGpu(host);
    // The same total on both sides: the scaling is then the same IEEE multiplication per element.
    Tensor total = kernels::totalNorm(host, 2.0);
    kernels::scaleByClipCoefficient(host, total, 0.25);
    kernels::scaleByClipCoefficient(dev, gpu(total), 0.25);
    for (size_t i = 0; i < host.size(); ++i) {
      EXPECT_TRUE(
          gpuMatches(dev[i], host[i], kExact, std::string(dtypeName(t)) + " tensor " + std::to_string(i)));
    }
    // Under the limit nothing changes; a NaN total makes everything NaN (PyTorch's rule).
    kernels::scaleByClipCoefficient(dev, gpu(total), 1e9);
    for (size_t i = 0; i < host.size(); ++i) EXPECT_TRUE(gpuMatches(dev[i], host[i], kExact));
    kernels::scaleByClipCoefficient(dev, gpu(Tensor::scalar(NAN, DType::f64)), 1.0);
    EXPECT_TRUE(std::isnan(dev[7].toVector<double>()[5]));
    EXPECT_TRUE(std::isnan(dev[17].toVector<double>()[0]));
  }
  // bf16 and f16: rounded from f32, as x.to(f32) * float(coef) (the host's loop too).
  for (DType t : {DType::bf16, DType::f16}) {
    Tensor h = hostRandom({70001}, t, 3), d = gpu(h);
    const double coef = 0.3 / (2.0 + 1e-6);
    kernels::scaleByClipCoefficient({d}, gpu(Tensor::scalar(2.0, DType::f64)), 0.3);
    Tensor want =
        kernels::binaryScalar(kernels::BinaryOp::mul, h.to(DType::f32), static_cast<float>(coef)).to(t);
    EXPECT_TRUE(gpuMatches(d, want, kExact, dtypeName(t)));
  }
  // Operands on different devices are refused.
  Tensor d = gpu(hostRandom({3}, DType::f32, 1));
  EXPECT_THROW(kernels::scaleByClipCoefficient({d}, Tensor::scalar(1.0, DType::f64), 1.0), ValueError);
  EXPECT_THROW(kernels::totalNorm({d, hostRandom({3}, DType::f32, 1)}, 2.0), ValueError);
  EXPECT_THROW(kernels::totalNorm({gpu(Tensor::zeros({3}, DType::i64))}, 2.0), NotSupportedError);
}

TEST(GpuMetrics, correct_count_matches_the_host) {
  LOCKSTEP_REQUIRE_GPU();
  Tensor dc = Tensor::scalar(0, DType::i64, Device::cuda(0));
  int64_t host_total = 0;
  for (DType t : lockstep::testing::kFloatDTypes) {
    for (Shape s : {Shape{1000, 10}, Shape{300, 257}, Shape{5, 1}, Shape{0, 10}, Shape{70000, 3}}) {
      // Few distinct values (ties), NaNs, and a NaN in column 0 of some rows.
      Tensor l = kernels::binaryScalar(kernels::BinaryOp::mul, hostRandom(s, DType::f32, s[0] + s[1]), 2.0);
      l = l.to(DType::i64).to(DType::f32);  // -1, 0, 1: many ties
      if (s[0] > 20 && s[1] > 2) {
        l.narrow(0, 3, 1).narrow(1, 1, 1).fill(NAN);
        l.narrow(0, 7, 1).narrow(1, 0, 1).fill(NAN);
        l.narrow(0, 9, 1).fill(NAN);
      }
      l = l.to(t);
      std::vector<int64_t> y(static_cast<size_t>(s[0]));
      for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<int64_t>((i * 7) % static_cast<size_t>(s[1]));
      Tensor target = Tensor::fromVector(y, {s[0]});
      Tensor hc = Tensor::scalar(0, DType::i64);
      kernels::countCorrectInto(l, target, hc);
      Tensor one = Tensor::scalar(0, DType::i64, Device::cuda(0));
      kernels::countCorrectInto(gpu(l), gpu(target), one);
      EXPECT_EQ(one.item<int64_t>(), hc.item<int64_t>()) << dtypeName(t) << " " << shapeToString(s);
      kernels::countCorrectInto(gpu(l), gpu(target), dc);  // one counter over every call
      host_total += hc.item<int64_t>();
    }
  }
  EXPECT_EQ(dc.item<int64_t>(), host_total);
}
