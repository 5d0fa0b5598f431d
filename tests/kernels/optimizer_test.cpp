// Optimizer update kernels over flat spans: a parameter stepped in pieces (ZeRO's shards of a
// bucket) must come out bitwise equal to the parameter stepped whole, for every option the loops
// specialise on, in f32 and f64; bf16 and f16 spans (in pieces) are bitwise the f32 update of
// their widened values, rounded back; bad spans are refused with a message naming the problem.
// (Agreement with torch is tested through the optimizers, tests/optim/optimizer_test.cpp.)
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "lockstep/kernels.h"
#include "lockstep/tensor/convert.h"
#include "lockstep/util/error.h"

using namespace lockstep;
using kernels::AdamParams;
using kernels::AdamSpan;
using kernels::SgdParams;
using kernels::SgdSpan;

namespace {

// Whole: one span. Two: an uneven cut. Three: uneven, the middle piece large enough (> 32768) to
// be split across threads inside the kernel, the last one element.
constexpr int64_t kN = 70001;
const std::vector<std::vector<int64_t>> kCuts = {{}, {12345}, {3, 69999}};

// N(0, scale^2) values from a fixed seed, drawn once per (type, seed, scale).
template <typename T>
const std::vector<T>& randomBuffer(uint64_t seed, double scale = 1.0) {
  static std::map<std::pair<uint64_t, double>, std::vector<T>> cache;
  auto [it, fresh] = cache.try_emplace({seed, scale});
  if (fresh) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> nd(0.0, scale);
    it->second.resize(kN);
    for (auto& x : it->second) x = static_cast<T>(nd(rng));
  }
  return it->second;
}

template <typename T>
bool sameBits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// [begin, end) pieces of [0, kN) at the given cuts.
std::vector<std::pair<int64_t, int64_t>> pieces(const std::vector<int64_t>& cuts) {
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t begin = 0;
  for (int64_t c : cuts) out.emplace_back(begin, c), begin = c;
  out.emplace_back(begin, kN);
  return out;
}

template <typename T>
struct SgdState {
  std::vector<T> p = randomBuffer<T>(1), buf = std::vector<T>(kN, T(0));
};

// Three steps (the first fills the momentum buffer), each over the pieces of `cuts`.
template <typename T>
SgdState<T> runSgd(const SgdParams& base, const std::vector<int64_t>& cuts) {
  SgdState<T> s;
  for (int step = 0; step < 3; ++step) {
    const std::vector<T>& g = randomBuffer<T>(100 + static_cast<uint64_t>(step));
    SgdParams o = base;
    o.first_step = step == 0;
    o.lr = base.lr / (1 + step);
    for (auto [b, e] : pieces(cuts)) {
      kernels::sgdStep({.param = s.p.data() + b,
                        .grad = g.data() + b,
                        .momentum_buffer = o.momentum != 0.0 ? s.buf.data() + b : nullptr,
                        .numel = e - b,
                        .dtype = DTypeOf<T>::value},
                       o);
    }
  }
  return s;
}

template <typename T>
struct AdamState {
  std::vector<T> p = randomBuffer<T>(2), m = std::vector<T>(kN, T(0)), v = m, vmax = m;
};

template <typename T>
AdamState<T> runAdam(const AdamParams& base, const std::vector<int64_t>& cuts) {
  AdamState<T> s;
  for (int step = 1; step <= 3; ++step) {
    const std::vector<T>& g = randomBuffer<T>(200 + static_cast<uint64_t>(step), 0.1);
    AdamParams o = base;
    o.step = step;
    for (auto [b, e] : pieces(cuts)) {
      kernels::adamStep({.param = s.p.data() + b,
                         .grad = g.data() + b,
                         .exp_avg = s.m.data() + b,
                         .exp_avg_sq = s.v.data() + b,
                         .max_exp_avg_sq = o.amsgrad ? s.vmax.data() + b : nullptr,
                         .numel = e - b,
                         .dtype = DTypeOf<T>::value},
                        o);
    }
  }
  return s;
}

std::vector<SgdParams> sgdCases() {
  std::vector<SgdParams> out;
  for (bool maximize : {false, true})
    for (double wd : {0.0, 0.01})
      for (double momentum : {0.0, 0.9})
        for (bool nesterov : {false, true}) {
          if (nesterov && momentum == 0.0) continue;
          out.push_back({.lr = 0.05,
                         .momentum = momentum,
                         .weight_decay = wd,
                         .nesterov = nesterov,
                         .maximize = maximize});
        }
  out.push_back({.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01});
  return out;
}

std::vector<AdamParams> adamCases() {
  std::vector<AdamParams> out;
  for (bool decoupled : {false, true})
    for (bool maximize : {false, true})
      for (double wd : {0.0, 0.1})
        for (bool amsgrad : {false, true})
          out.push_back({.lr = 0.01,
                         .beta1 = 0.8,
                         .beta2 = 0.99,
                         .eps = 1e-6,
                         .weight_decay = wd,
                         .decoupled_weight_decay = decoupled,
                         .amsgrad = amsgrad,
                         .maximize = maximize});
  return out;
}

std::string describe(const SgdParams& o) {
  return "momentum=" + std::to_string(o.momentum) + " dampening=" + std::to_string(o.dampening) +
         " wd=" + std::to_string(o.weight_decay) + " nesterov=" + std::to_string(o.nesterov) +
         " maximize=" + std::to_string(o.maximize);
}

std::string describe(const AdamParams& o) {
  return std::string(o.decoupled_weight_decay ? "AdamW" : "Adam") + " wd=" + std::to_string(o.weight_decay) +
         " amsgrad=" + std::to_string(o.amsgrad) + " maximize=" + std::to_string(o.maximize);
}

template <typename T>
void expectSgdSpansMatchWhole() {
  for (const auto& o : sgdCases()) {
    const SgdState<T> whole = runSgd<T>(o, kCuts[0]);
    ASSERT_FALSE(sameBits(whole.p, SgdState<T>{}.p)) << "the update changed nothing: " << describe(o);
    for (size_t c = 1; c < kCuts.size(); ++c) {
      SCOPED_TRACE(describe(o) + ", " + std::to_string(kCuts[c].size() + 1) + " spans");
      const SgdState<T> split = runSgd<T>(o, kCuts[c]);
      EXPECT_TRUE(sameBits(split.p, whole.p));
      EXPECT_TRUE(sameBits(split.buf, whole.buf));
    }
  }
}

template <typename T>
void expectAdamSpansMatchWhole() {
  for (const auto& o : adamCases()) {
    const AdamState<T> whole = runAdam<T>(o, kCuts[0]);
    ASSERT_FALSE(sameBits(whole.p, AdamState<T>{}.p)) << "the update changed nothing: " << describe(o);
    for (size_t c = 1; c < kCuts.size(); ++c) {
      SCOPED_TRACE(describe(o) + ", " + std::to_string(kCuts[c].size() + 1) + " spans");
      const AdamState<T> split = runAdam<T>(o, kCuts[c]);
      EXPECT_TRUE(sameBits(split.p, whole.p));
      EXPECT_TRUE(sameBits(split.m, whole.m));
      EXPECT_TRUE(sameBits(split.v, whole.v));
      EXPECT_TRUE(sameBits(split.vmax, whole.vmax));
    }
  }
}

// ---- 16-bit spans -------------------------------------------------------------------------------

std::vector<uint16_t> narrowed(const std::vector<float>& x, DType dtype) {
  std::vector<uint16_t> out(x.size());
  convert16(dtype == DType::bf16).narrow(x.data(), out.data(), static_cast<int64_t>(x.size()));
  return out;
}

std::vector<float> widened(const std::vector<uint16_t>& x, DType dtype) {
  std::vector<float> out(x.size());
  convert16(dtype == DType::bf16).widen(x.data(), out.data(), static_cast<int64_t>(x.size()));
  return out;
}

// The 16-bit buffers of an update (parameter, then its states) after three steps: over the pieces
// of `cuts` in `dtype`, or (reference) each step as the f32 kernel over the whole widened buffers,
// rounded back. step(bufs, grad, numel, dtype, step) runs one span's update.
template <typename Step>
std::vector<std::vector<uint16_t>> runLow(DType dtype, const std::vector<int64_t>& cuts, bool reference,
                                          uint64_t grad_seed, double grad_scale, Step&& step) {
  std::vector<std::vector<uint16_t>> bufs(4, std::vector<uint16_t>(kN, 0));
  bufs[0] = narrowed(randomBuffer<float>(3), dtype);
  for (int t = 1; t <= 3; ++t) {
    const std::vector<uint16_t> g = narrowed(randomBuffer<float>(grad_seed + t, grad_scale), dtype);
    if (reference) {
      std::vector<std::vector<float>> wide;
      for (const auto& b : bufs) wide.push_back(widened(b, dtype));
      const std::vector<float> gw = widened(g, dtype);
      step(std::array<void*, 4>{wide[0].data(), wide[1].data(), wide[2].data(), wide[3].data()}, gw.data(),
           kN, DType::f32, t);
      for (size_t k = 0; k < bufs.size(); ++k) bufs[k] = narrowed(wide[k], dtype);
      continue;
    }
    for (auto [b, e] : pieces(cuts)) {
      step(std::array<void*, 4>{bufs[0].data() + b, bufs[1].data() + b, bufs[2].data() + b,
                                bufs[3].data() + b},
           g.data() + b, e - b, dtype, t);
    }
  }
  return bufs;
}

void expectLowPrecisionIsTheWidenedUpdate(DType dtype) {
  for (const auto& o : sgdCases()) {
    auto step = [&](std::array<void*, 4> b, const void* g, int64_t n, DType t, int i) {
      SgdParams p = o;
      p.first_step = i == 1;
      kernels::sgdStep({.param = b[0],
                        .grad = g,
                        .momentum_buffer = o.momentum != 0.0 ? b[1] : nullptr,
                        .numel = n,
                        .dtype = t},
                       p);
    };
    const auto want = runLow(dtype, {}, true, 100, 1.0, step);
    ASSERT_NE(want[0], narrowed(randomBuffer<float>(3), dtype))
        << "the update changed nothing: " << describe(o);
    for (const auto& cuts : kCuts) {
      SCOPED_TRACE(std::string(dtypeName(dtype)) + " SGD " + describe(o) + ", " +
                   std::to_string(cuts.size() + 1) + " spans");
      EXPECT_EQ(runLow(dtype, cuts, false, 100, 1.0, step), want);
    }
  }
  for (const auto& o : adamCases()) {
    auto step = [&](std::array<void*, 4> b, const void* g, int64_t n, DType t, int i) {
      AdamParams p = o;
      p.step = i;
      kernels::adamStep({.param = b[0],
                         .grad = g,
                         .exp_avg = b[1],
                         .exp_avg_sq = b[2],
                         .max_exp_avg_sq = o.amsgrad ? b[3] : nullptr,
                         .numel = n,
                         .dtype = t},
                        p);
    };
    const auto want = runLow(dtype, {}, true, 200, 0.1, step);
    ASSERT_NE(want[0], narrowed(randomBuffer<float>(3), dtype))
        << "the update changed nothing: " << describe(o);
    for (const auto& cuts : kCuts) {
      SCOPED_TRACE(std::string(dtypeName(dtype)) + " " + describe(o) + ", " +
                   std::to_string(cuts.size() + 1) + " spans");
      EXPECT_EQ(runLow(dtype, cuts, false, 200, 0.1, step), want);
    }
  }
}

template <typename Fn>
std::string errorOf(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST(OptimizerKernels, sgd_in_uneven_spans_is_bitwise_the_whole_update_f32) {
  expectSgdSpansMatchWhole<float>();
}

TEST(OptimizerKernels, sgd_in_uneven_spans_is_bitwise_the_whole_update_f64) {
  expectSgdSpansMatchWhole<double>();
}

TEST(OptimizerKernels, adam_in_uneven_spans_is_bitwise_the_whole_update_f32) {
  expectAdamSpansMatchWhole<float>();
}

TEST(OptimizerKernels, adam_in_uneven_spans_is_bitwise_the_whole_update_f64) {
  expectAdamSpansMatchWhole<double>();
}

TEST(OptimizerKernels, bf16_spans_step_in_f32_arithmetic_rounded_back) {
  expectLowPrecisionIsTheWidenedUpdate(DType::bf16);
}

TEST(OptimizerKernels, f16_spans_step_in_f32_arithmetic_rounded_back) {
  expectLowPrecisionIsTheWidenedUpdate(DType::f16);
}

TEST(OptimizerKernels, f32_states_beside_16_bit_parameters_are_kept_unrounded) {
  // DeepSpeedCPUAdam's fp32_optimizer_states beside bf16 / f16 parameters: the parameters are
  // rounded after every step, the states never (the f32 update of widened parameters and gradients
  // with f32 states), in pieces as whole.
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (const auto& o : adamCases()) {
      SCOPED_TRACE(std::string(dtypeName(dtype)) + " " + describe(o));
      auto run = [&](const std::vector<int64_t>& cuts, bool reference) {
        std::vector<uint16_t> p = narrowed(randomBuffer<float>(3), dtype);
        std::vector<float> m(kN, 0.0f), v(kN, 0.0f), vmax(kN, 0.0f);
        for (int t = 1; t <= 3; ++t) {
          AdamParams a = o;
          a.step = t;
          const std::vector<uint16_t> g = narrowed(randomBuffer<float>(200 + t, 0.1), dtype);
          if (reference) {
            std::vector<float> pw = widened(p, dtype);
            const std::vector<float> gw = widened(g, dtype);
            kernels::adamStep({.param = pw.data(),
                               .grad = gw.data(),
                               .exp_avg = m.data(),
                               .exp_avg_sq = v.data(),
                               .max_exp_avg_sq = o.amsgrad ? vmax.data() : nullptr,
                               .numel = kN},
                              a);
            p = narrowed(pw, dtype);
            continue;
          }
          for (auto [b, e] : pieces(cuts)) {
            kernels::adamStep({.param = p.data() + b,
                               .grad = g.data() + b,
                               .exp_avg = m.data() + b,
                               .exp_avg_sq = v.data() + b,
                               .max_exp_avg_sq = o.amsgrad ? vmax.data() + b : nullptr,
                               .numel = e - b,
                               .dtype = dtype,
                               .state_dtype = DType::f32},
                              a);
          }
        }
        return std::tuple{p, m, v, vmax};
      };
      const auto want = run({}, true);
      for (const auto& cuts : kCuts) EXPECT_EQ(run(cuts, false), want) << cuts.size() + 1 << " spans";
      // The states hold more than bf16 / f16 can: they were not rounded.
      const std::vector<float>& m = std::get<1>(want);
      EXPECT_NE(widened(narrowed(m, dtype), dtype), m);
    }
  }
  // Any other pair of dtypes is refused, naming both.
  std::vector<float> p(4, 1.0f), g(4, 1.0f), m(4), v(4);
  const std::string e = errorOf([&] {
    kernels::adamStep({.param = p.data(),
                       .grad = g.data(),
                       .exp_avg = m.data(),
                       .exp_avg_sq = v.data(),
                       .numel = 4,
                       .state_dtype = DType::bf16},
                      {});
  });
  EXPECT_TRUE(has(e, "states of dtype bf16 beside f32 parameters")) << e;
}

TEST(OptimizerKernels, options_change_the_update) {
  // Each specialised flag must reach its loop: flipping it changes the result.
  const SgdParams sgd{.lr = 0.05, .momentum = 0.9};
  const auto plain = runSgd<double>(sgd, {}).p;
  for (auto flip : {+[](SgdParams& o) { o.nesterov = true; }, +[](SgdParams& o) { o.maximize = true; },
                    +[](SgdParams& o) { o.weight_decay = 0.1; }, +[](SgdParams& o) { o.dampening = 0.5; }}) {
    SgdParams o = sgd;
    flip(o);
    EXPECT_FALSE(sameBits(runSgd<double>(o, {}).p, plain)) << describe(o);
  }
  const AdamParams adam{.lr = 0.01, .weight_decay = 0.1};
  const auto l2 = runAdam<double>(adam, {}).p;
  for (auto flip : {+[](AdamParams& o) { o.decoupled_weight_decay = true; },
                    +[](AdamParams& o) { o.amsgrad = true; }, +[](AdamParams& o) { o.maximize = true; }}) {
    AdamParams o = adam;
    flip(o);
    EXPECT_FALSE(sameBits(runAdam<double>(o, {}).p, l2)) << describe(o);
  }
}

TEST(OptimizerKernels, empty_span_is_a_no_op) {
  EXPECT_NO_THROW(kernels::sgdStep({.numel = 0}, {.momentum = 0.9}));
  EXPECT_NO_THROW(kernels::adamStep({.numel = 0, .dtype = DType::f64}, {.amsgrad = true}));
}

TEST(OptimizerKernels, bad_spans_are_refused_naming_the_problem) {
  std::vector<float> p(4, 1.0f), g(4, 1.0f), m(4), v(4);
  std::string e = errorOf(
      [&] { kernels::sgdStep({.param = p.data(), .grad = g.data(), .numel = 4}, {.momentum = 0.9}); });
  EXPECT_TRUE(has(e, "sgdStep") && has(e, "momentum buffer")) << e;
  e = errorOf([&] { kernels::sgdStep({.param = p.data(), .grad = nullptr, .numel = 4}, {}); });
  EXPECT_TRUE(has(e, "sgdStep") && has(e, "null parameter or gradient")) << e;
  e = errorOf([&] { kernels::sgdStep({.param = p.data(), .grad = g.data(), .numel = -1}, {}); });
  EXPECT_TRUE(has(e, "negative element count -1")) << e;
  EXPECT_THROW(kernels::sgdStep({.param = p.data(), .grad = g.data(), .numel = 4, .dtype = DType::i64}, {}),
               NotSupportedError);
  const AdamSpan ok{
      .param = p.data(), .grad = g.data(), .exp_avg = m.data(), .exp_avg_sq = v.data(), .numel = 4};
  e = errorOf([&] { kernels::adamStep(ok, {.step = 0}); });
  EXPECT_TRUE(has(e, "adamStep") && has(e, "step must be >= 1")) << e;
  e = errorOf([&] { kernels::adamStep(ok, {.amsgrad = true}); });
  EXPECT_TRUE(has(e, "amsgrad") && has(e, "max_exp_avg_sq")) << e;
  AdamSpan no_m = ok;
  no_m.exp_avg = nullptr;
  e = errorOf([&] { kernels::adamStep(no_m, {}); });
  EXPECT_TRUE(has(e, "exp_avg")) << e;
  AdamSpan ints = ok;
  ints.dtype = DType::i32;
  e = errorOf([&] { kernels::adamStep(ints, {}); });
  EXPECT_TRUE(has(e, "f32, f64, bf16 and f16") && has(e, "i32")) << e;
  // Nothing was written by a refused call.
  EXPECT_EQ(p, std::vector<float>(4, 1.0f));
}
