// The CUDA kernels as one table, after ggml's test-backend-ops: each case names an op, the operand
// sets it runs on (shapes, layouts, a dim, every floating dtype) and what the GPU result is held to:
// the CPU kernel on the same operands, or, for transcendental math (exp, log, pow, erf, tanh,
// softmax), the f64 oracle rounded once; with which tolerance; and the layout the result must
// take. One runner and one tolerance function (gpu_compare.h's tolFor) check every case. Cases
// here: binary, unary, activations, softmax, concat, sum/mean, the losses, pooling, dropout, layer
// norm, RMSNorm, batch norm, linear, matmul, conv2d, embedding, SwiGLU, rotary, attention, and the
// SGD and Adam/AdamW updates; the
// gpu_<group>_test.cpp files keep what a table cannot say (errors, NaN rules, integer math, device
// flags, strided views, repeatability). Runs with ctest -L gpu; skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "gpu_compare.h"
#include "lockstep/kernels.h"
#include "lockstep/kernels/pool.h"

using namespace lockstep;
using lockstep::testing::f64;
using lockstep::testing::gpu;
using lockstep::testing::gpuMatches;
using lockstep::testing::hostRandom;
using lockstep::testing::kFloatDTypes;
using lockstep::testing::OpClass;
using lockstep::testing::oracle;

namespace {

using Operands = std::vector<Tensor>;
using lockstep::testing::Tol;

/// One operand set: the tensors and, for ops along a dim (softmax, concat), the dim, or along
/// several (sum, mean), the dims.
struct Inputs {
  Operands x;
  int64_t dim = 0;
  std::vector<int64_t> dims = {};
};
enum class Against { cpu, oracle };
enum class Layout {
  any,                  // values only
  cpu,                  // the CPU kernel's strides
  cpu_input,            // the CPU kernel's strides, which are the (dense) input's
  contiguous,           // a contiguous result
  keeps_channels_last,  // an image result channels-last when the first operand is
  rule,                 // as the case's layout_rule says
};

struct OpCase {
  std::string name;
  std::function<Operands(const Inputs&)> run;        // operands -> results, on their device
  std::function<std::vector<Inputs>(DType)> inputs;  // the host operand sets for one dtype
  Against against = Against::cpu;
  Layout layout = Layout::any;
  /// The tolerance for result number `result`, held to `want`, from these operands.
  std::function<Tol(const Tensor& want, const Inputs&, size_t result)> tol =
      [](const Tensor& want, const Inputs&, size_t) { return lockstep::testing::tolFor(want.dtype()); };
  /// For Layout::rule: whether result number `result` has the layout it must.
  std::function<bool(const Tensor& got, const Inputs&, size_t result)> layout_rule = nullptr;
};

Tol exact(const Tensor&, const Inputs&, size_t) { return lockstep::testing::kExact; }

Inputs onDevice(const Inputs& in) {
  Inputs g{{}, in.dim, in.dims};
  for (const Tensor& x : in.x) g.x.push_back(x.defined() ? gpu(x) : x);
  return g;
}
Inputs widened(const Inputs& in) {
  Inputs w{{}, in.dim, in.dims};
  for (const Tensor& x : in.x) w.x.push_back(f64(x));
  return w;
}

// Operand pairs: same shape, broadcast both ways, a scalar, a transposed view, an empty tensor.
std::vector<Inputs> binaryOperands(DType t, bool swapped) {
  std::vector<Inputs> v;
  auto add = [&](Tensor a, Tensor b) { v.push_back({swapped ? Operands{b, a} : Operands{a, b}}); };
  add(hostRandom({3, 5}, t, 1), hostRandom({3, 5}, t, 2, 0.5, 2.0));
  add(hostRandom({2, 3, 5, 7}, t, 3), hostRandom({3, 1, 7}, t, 4, 0.5, 2.0));
  add(hostRandom({4, 1}, t, 5), hostRandom({1, 6}, t, 6, 0.5, 2.0));
  add(hostRandom({1}, t, 7), hostRandom({1001}, t, 8, 0.5, 2.0));
  add(hostRandom({6, 4}, t, 9).transpose(0, 1), hostRandom({4, 6}, t, 10, 0.5, 2.0));
  add(hostRandom({0, 3}, t, 11), hostRandom({3}, t, 12, 0.5, 2.0));
  return v;
}

// Inputs for the element-wise maps: odd sizes, a transposed view, a channels-last image.
std::vector<Tensor> mapInputs(DType t, double low, double high) {
  std::vector<Tensor> xs;
  for (const Shape& s : std::vector<Shape>{{1}, {7}, {3, 5}, {2, 3, 5, 7}, {4099}})
    xs.push_back(hostRandom(s, t, 3, low, high));
  xs.push_back(hostRandom({5, 3}, t, 4, low, high).transpose(0, 1));
  xs.push_back(hostRandom({2, 3, 4, 5}, t, 5, low, high).toFormat(MemoryFormat::channels_last));
  return xs;
}

// {x} for each map input.
std::function<std::vector<Inputs>(DType)> maps(double low, double high) {
  return [=](DType t) {
    std::vector<Inputs> v;
    for (const Tensor& x : mapInputs(t, low, high)) v.push_back({{x}});
    return v;
  };
}

// {gy, saved} for each map input: saved is the input x, or the forward's output rounded from the
// f64 oracle (the same numbers on both sides).
std::function<std::vector<Inputs>(DType)> backwardMaps(double low, double high,
                                                       std::function<Tensor(const Tensor&)> output) {
  return [=](DType t) {
    std::vector<Inputs> v;
    for (const Tensor& x : mapInputs(t, low, high)) {
      v.push_back({{hostRandom(x.shape(), t, 9), output ? oracle(output(f64(x)), t) : x}});
    }
    return v;
  };
}

// Softmax operands along a dim: short (warp) and long (block) rows, a middle and a leading dim, a
// transposed view, a channels-last image, one row, an empty tensor.
std::vector<Inputs> softmaxInputs(DType t) {
  return {{{hostRandom({4, 10}, t, 1, -4, 4)}, -1},
          {{hostRandom({3, 3000}, t, 2, -4, 4)}, 1},
          {{hostRandom({2, 3, 5, 7}, t, 3, -4, 4)}, 1},
          {{hostRandom({2, 3, 5, 7}, t, 4, -4, 4)}, 0},
          {{hostRandom({6, 4}, t, 5, -4, 4).transpose(0, 1)}, 1},
          {{hostRandom({2, 3, 4, 5}, t, 6, -4, 4).toFormat(MemoryFormat::channels_last)}, 1},
          {{hostRandom({5}, t, 7)}, 0},
          {{hostRandom({0, 5}, t, 8)}, 1}};
}

// {gy, y} on softmaxInputs, y the forward's output rounded from the f64 oracle.
std::function<std::vector<Inputs>(DType)> softmaxBackwardInputs(Tensor (*forward)(const Tensor&, int64_t)) {
  return [forward](DType t) {
    std::vector<Inputs> v;
    for (const Inputs& in : softmaxInputs(t)) {
      const Tensor& x = in.x[0];
      v.push_back({{hostRandom(x.shape(), t, 11), oracle(forward(f64(x), in.dim), t)}, in.dim});
    }
    return v;
  };
}

// Three parts along each dim, sized 1, 0 and 5 there, the last one channels-last.
std::vector<Inputs> concatInputs(DType t) {
  std::vector<Inputs> v;
  for (int64_t dim : {0, 1, 2, -1}) {
    Inputs in{{}, dim};
    for (int i = 0; i < 3; ++i) {
      Shape s{2, 3, 5, 7};
      s[dim < 0 ? 3 : dim] = i == 1 ? 0 : 2 * i + 1;
      in.x.push_back(hostRandom(s, t, 10 + i));
    }
    in.x[2] = in.x[2].toFormat(MemoryFormat::channels_last);
    v.push_back(in);
  }
  return v;
}

std::vector<OpCase> elementwiseCases() {
  std::vector<OpCase> cases;
  using kernels::BinaryOp;
  for (BinaryOp op : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div}) {
    const std::string name = kernels::binaryOpName(op);
    auto run = [op](const Inputs& in) { return Operands{kernels::binary(op, in.x[0], in.x[1])}; };
    cases.push_back({name, run, [](DType t) { return binaryOperands(t, false); }});
    cases.push_back({name + " swapped", run, [](DType t) { return binaryOperands(t, true); }});
    cases.push_back({name + " scalar",
                     [op](const Inputs& in) { return Operands{kernels::binaryScalar(op, in.x[0], 1.75)}; },
                     [](DType t) { return binaryOperands(t, false); }});
  }
  using kernels::UnaryOp;
  for (UnaryOp op : {UnaryOp::neg, UnaryOp::exp, UnaryOp::log, UnaryOp::sqrt, UnaryOp::pow}) {
    const std::string name = kernels::unaryOpName(op);
    // Values against the f64 oracle (oneDNN's f32 log on the CPU is off by up to 3.5e-6); the
    // layout against the CPU kernel's.
    cases.push_back({name, [op](const Inputs& in) { return Operands{kernels::unary(op, in.x[0], 2.5)}; },
                     maps(0.25, 3.0), Against::oracle, Layout::cpu});
    std::function<Tensor(const Tensor&)> output;
    if (kernels::unaryBackwardUsesOutput(op))
      output = [op](const Tensor& x) { return kernels::unary(op, x, 2.5); };
    cases.push_back(
        {name + " backward",
         [op](const Inputs& in) { return Operands{kernels::unaryBackward(op, in.x[0], in.x[1], 2.5)}; },
         backwardMaps(0.25, 3.0, output), Against::oracle});
  }
  // Values against the f64 oracle (erf, tanh and exp are approximations in the CPU's f32 kernels),
  // the layout against the CPU kernel's: a dense input's, for every activation.
  struct Activation {
    const char* name;
    Tensor (*fwd)(const Tensor&);
    Tensor (*bwd)(const Tensor&, const Tensor&);
    bool from_output;
  };
  const Activation activations[] = {{"relu", kernels::reluForward, kernels::reluBackward, true},
                                    {"gelu", kernels::geluForward, kernels::geluBackward, false},
                                    {"gelu_tanh", kernels::geluTanhForward, kernels::geluTanhBackward, false},
                                    {"silu", kernels::siluForward, kernels::siluBackward, false},
                                    {"tanh", kernels::tanhForward, kernels::tanhBackward, true},
                                    {"sigmoid", kernels::sigmoidForward, kernels::sigmoidBackward, true}};
  for (const Activation& a : activations) {
    auto fwd = a.fwd;
    auto bwd = a.bwd;
    cases.push_back({a.name, [fwd](const Inputs& in) { return Operands{fwd(in.x[0])}; }, maps(-4.0, 4.0),
                     Against::oracle, Layout::cpu_input});
    std::function<Tensor(const Tensor&)> output;
    if (a.from_output) output = fwd;
    cases.push_back({std::string(a.name) + " backward",
                     [bwd](const Inputs& in) { return Operands{bwd(in.x[0], in.x[1])}; },
                     backwardMaps(-4.0, 4.0, output), Against::oracle, Layout::cpu});
  }
  for (double slope : {0.01, 0.2}) {
    const std::string name = "leaky_relu " + std::to_string(slope);
    cases.push_back(
        {name, [slope](const Inputs& in) { return Operands{kernels::leakyReluForward(in.x[0], slope)}; },
         maps(-4.0, 4.0)});
    cases.push_back(
        {name + " backward",
         [slope](const Inputs& in) { return Operands{kernels::leakyReluBackward(in.x[0], in.x[1], slope)}; },
         backwardMaps(-4.0, 4.0, nullptr)});
  }  // Values against the f64 oracle (oneDNN's f32 log-softmax on the CPU is off by up to 3.7e-6),
  // the forward's layout against the CPU kernel's.
  using Softmax = Tensor (*)(const Tensor&, int64_t);
  using SoftmaxBackward = Tensor (*)(const Tensor&, const Tensor&, int64_t);
  const std::tuple<const char*, Softmax, SoftmaxBackward> softmaxes[] = {
      {"softmax", kernels::softmaxForward, kernels::softmaxBackward},
      {"log_softmax", kernels::logSoftmaxForward, kernels::logSoftmaxBackward}};
  for (const auto& [name, fwd, bwd] : softmaxes) {
    cases.push_back({name, [fwd](const Inputs& in) { return Operands{fwd(in.x[0], in.dim)}; }, softmaxInputs,
                     Against::oracle, std::string(name) == "softmax" ? Layout::cpu : Layout::any});
    cases.push_back({std::string(name) + " backward",
                     [bwd](const Inputs& in) { return Operands{bwd(in.x[0], in.x[1], in.dim)}; },
                     softmaxBackwardInputs(fwd), Against::oracle});
  }
  // A copy: bitwise the CPU's, contiguous.
  cases.push_back({"concat", [](const Inputs& in) { return Operands{kernels::concat(in.x, in.dim)}; },
                   concatInputs, Against::cpu, Layout::contiguous, exact});
  return cases;
}

// Sums and means over leading, trailing, middle, all and no dims; long rows (the two-pass path),
// many columns (the column paths, one pass and split), empty tensors (sum only: a mean of nothing
// is NaN, gpu_reduce_test.cpp).
std::vector<Inputs> reduceInputs(DType t, bool with_empty) {
  const std::pair<Shape, std::vector<int64_t>> shapes[] = {
      {{3, 5}, {1}},
      {{3, 5}, {0}},
      {{2, 3, 5, 7}, {1, 3}},
      {{2, 3, 5, 7}, {0, 2, 3}},
      {{2, 3, 5, 7}, {-1}},
      {{4, 6}, {}},
      {{7}, {0}},
      {{1}, {0}},
      {{3, 40000}, {1}},
      {{2, 100003}, {-1}},
      {{64, 2048}, {0}},
      {{5000, 3}, {0}},
      {{600, 1500}, {1}},
      {{0, 4}, {0}},
      {{0, 4}, {1}},
      {{8, 2, 1025}, {0, 2}},
      {{20000, 40}, {0}},
      {{3000, 7, 33}, {0, 1}},
      {{4, 300}, {0}},
  };
  std::vector<Inputs> v;
  for (const auto& [shape, dims] : shapes) {
    Tensor x = hostRandom(shape, t, 7);
    if (with_empty || x.numel() > 0) v.push_back({{x}, 0, dims});
  }
  return v;
}

// Sums of many terms differ by their accumulation order: the f32 bound grows with the count.
Tol sumTol(const Tensor& want, const Inputs& in, size_t) {
  const DType t = want.dtype();
  Tol tol = lockstep::testing::tolFor(t);
  const int64_t out = kernels::reduce(kernels::ReduceOp::sum, in.x[0], in.dims).numel();
  const int64_t terms = in.x[0].numel() / std::max<int64_t>(1, out);
  if (t == DType::f32) tol.atol *= std::sqrt(static_cast<double>(terms) + 1.0);
  return tol;
}

std::vector<OpCase> reduceCases() {
  std::vector<OpCase> cases;
  for (kernels::ReduceOp op : {kernels::ReduceOp::sum, kernels::ReduceOp::mean}) {
    const bool sum = op == kernels::ReduceOp::sum;
    for (bool keepdim : {false, true}) {
      cases.push_back({std::string(sum ? "sum" : "mean") + (keepdim ? " keepdim" : ""),
                       [op, keepdim](const Inputs& in) {
                         return Operands{kernels::reduce(op, in.x[0], in.dims, keepdim)};
                       },
                       [sum](DType t) { return reduceInputs(t, sum); }, Against::cpu, Layout::contiguous,
                       sumTol});
    }
  }
  return cases;
}

using kernels::LossReduction;
constexpr LossReduction kReductions[] = {LossReduction::none, LossReduction::mean, LossReduction::sum};

std::string reductionName(LossReduction r) {
  return r == LossReduction::none ? "none" : r == LossReduction::mean ? "mean" : "sum";
}

// Class targets in [0, c), every third one ignore_index (-100) when `ignore`.
Tensor classTargets(int64_t n, int64_t c, bool ignore) {
  std::vector<int64_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[i] = ignore && i % 3 == 1 ? -100 : (i * 7 + 3) % c;
  return Tensor::fromVector(t, {n});
}

// A reduced loss in bf16/f16 rounds a sum; an f32 one adds in another order than the CPU.
Tol lossTol(const Tensor& want, const Inputs&, size_t) {
  const DType t = want.dtype();
  Tol tol = lockstep::testing::tolFor(t);
  if (t == DType::f32) tol = {1e-5, 1e-5};
  return tol;
}

// The upstream gradient of a loss: one per sample unreduced, else a scalar.
Tensor lossGrad(LossReduction r, const Shape& unreduced, DType t) {
  return r == LossReduction::none ? hostRandom(unreduced, t, 5) : Tensor::scalar(0.75, t);
}

// Cross-entropy: short (warp) and long (block) rows, one class, with and without ignored targets.
// {logits, targets, upstream gradient}, the gradient in the dtype of the CPU kernel's loss.
std::vector<Inputs> crossEntropyInputs(DType t, const kernels::CrossEntropyParams& p) {
  std::vector<Inputs> v;
  const DType loss_dtype =
      kernels::crossEntropyForward(hostRandom({2, 3}, t, 1), classTargets(2, 3, false), p).first.dtype();
  for (auto [n, c] : std::vector<std::pair<int64_t, int64_t>>{{7, 10}, {33, 1000}, {5, 5003}, {1, 1}}) {
    Tensor logits = hostRandom({n, c}, t, 3, -5, 5);
    for (bool ignore : {false, true}) {
      v.push_back({{logits, classTargets(n, c, ignore), lossGrad(p.reduction, {n}, loss_dtype)}});
    }
  }
  v.push_back({{hostRandom({10, 6}, t, 1).transpose(0, 1), classTargets(6, 10, false),
                lossGrad(p.reduction, {6}, loss_dtype)}});  // non-contiguous logits
  // Masked logits (every third class -inf; the kernel's online max and sum skip them), a warp's
  // row and a block's.
  for (auto [n, c] : std::vector<std::pair<int64_t, int64_t>>{{9, 700}, {3, 4100}}) {
    std::vector<double> x = hostRandom({n, c}, DType::f64, 5, -5, 5).toVector<double>();
    for (size_t i = 0; i < x.size(); ++i)
      if (i % 3 == 1) x[i] = -std::numeric_limits<double>::infinity();
    v.push_back({{Tensor::fromVector(x, {n, c}).to(t), classTargets(n, c, true),
                  lossGrad(p.reduction, {n}, loss_dtype)}});
  }
  return v;
}

std::vector<OpCase> lossCases() {
  std::vector<OpCase> cases;
  for (LossReduction r : kReductions) {
    // f32_loss (autocast's loss on bf16/f16 logits): an f32 loss read from the narrow logits.
    for (auto [smoothing, f32_loss] :
         std::vector<std::pair<double, bool>>{{0.0, false}, {0.1, false}, {0.1, true}}) {
      kernels::CrossEntropyParams p;
      p.reduction = r;
      p.label_smoothing = smoothing;
      p.f32_loss = f32_loss;
      const std::string name = "cross_entropy " + reductionName(r) + " smoothing " +
                               std::to_string(smoothing) + (f32_loss ? " f32_loss" : "");
      auto inputs = [p](DType t) { return crossEntropyInputs(t, p); };
      // Values against the f64 oracle (exp and log), rounded to the dtypes of the CPU kernel's
      // results (the log-sum-exp is f32 for bf16/f16 logits).
      cases.push_back({name,
                       [p](const Inputs& in) {
                         auto [loss, lse] = kernels::crossEntropyForward(in.x[0], in.x[1], p);
                         return Operands{loss, lse};
                       },
                       inputs, Against::oracle, Layout::any, lossTol});
      cases.push_back({name + " backward",
                       [p](const Inputs& in) {
                         const Tensor lse = kernels::crossEntropyForward(in.x[0], in.x[1], p).second;
                         return Operands{kernels::crossEntropyBackward(in.x[2], in.x[0], lse, in.x[1], p)};
                       },
                       inputs, Against::oracle});
    }
    // NLL on log-probabilities the CPU made: {log-probabilities, targets, upstream gradient}.
    auto nll_inputs = [r](DType t) {
      std::vector<Inputs> v;
      Tensor lp = kernels::logSoftmaxForward(hostRandom({9, 7}, t, 2, -3, 3), 1);
      for (bool ignore : {false, true}) v.push_back({{lp, classTargets(9, 7, ignore), lossGrad(r, {9}, t)}});
      return v;
    };
    cases.push_back(
        {"nll_loss " + reductionName(r),
         [r](const Inputs& in) { return Operands{kernels::nllLossForward(in.x[0], in.x[1], r, -100)}; },
         nll_inputs, Against::cpu, Layout::any, lossTol});
    cases.push_back({"nll_loss " + reductionName(r) + " backward",
                     [r](const Inputs& in) {
                       return Operands{kernels::nllLossBackward(in.x[2], in.x[1], in.x[0].size(1), r, -100)};
                     },
                     nll_inputs, Against::cpu});
    // MSE: a small matrix, a long vector (several blocks), a transposed operand.
    auto mse_inputs = [r](DType t) {
      std::vector<Inputs> v;
      const std::pair<Tensor, Tensor> pairs[] = {
          {hostRandom({5, 7}, t, 1), hostRandom({5, 7}, t, 2)},
          {hostRandom({300001}, t, 3), hostRandom({300001}, t, 4)},
          {hostRandom({7, 5}, t, 5).transpose(0, 1), hostRandom({5, 7}, t, 6)}};
      for (const auto& [a, b] : pairs) v.push_back({{a, b, lossGrad(r, a.shape(), t)}});
      return v;
    };
    cases.push_back({"mse_loss " + reductionName(r),
                     [r](const Inputs& in) { return Operands{kernels::mseLossForward(in.x[0], in.x[1], r)}; },
                     mse_inputs, Against::cpu, Layout::any,
                     [r](const Tensor& want, const Inputs& in, size_t i) {
                       const DType t = want.dtype();
                       Tol tol = lossTol(want, in, i);
                       if (t == DType::f32 && r == LossReduction::sum) tol.rtol = 1e-4;
                       return tol;
                     }});
    cases.push_back(
        {"mse_loss " + reductionName(r) + " backward",
         [r](const Inputs& in) { return Operands{kernels::mseLossBackward(in.x[2], in.x[0], in.x[1], r)}; },
         mse_inputs, Against::cpu});
  }
  return cases;
}

// Pooling windows: 2x2 stride 2, overlapping with padding, ceil_mode, ceil_mode excluding padding.
std::vector<std::pair<std::string, kernels::Pool2dParams>> poolParams() {
  kernels::Pool2dParams two, overlap, ceil;
  overlap.kernel = {3, 3};
  overlap.stride = {2, 2};
  overlap.padding = {1, 1};
  ceil.kernel = {3, 2};
  ceil.stride = {2, 3};
  ceil.padding = {1, 1};
  ceil.ceil_mode = true;
  kernels::Pool2dParams exclude = ceil;
  exclude.count_include_pad = false;
  return {{"2x2", two}, {"3x3 pad 1", overlap}, {"3x2 ceil", ceil}, {"3x2 ceil exclude_pad", exclude}};
}

// {x, gy} for a pooling to out_shape(x), NCHW and channels-last (strided views:
// gpu_pool_test.cpp).
std::function<std::vector<Inputs>(DType)> poolInputs(std::function<Shape(const Shape&)> out_shape) {
  return [out_shape](DType t) {
    std::vector<Inputs> v;
    const Tensor x = hostRandom({2, 3, 9, 11}, t, 1);
    for (const Tensor& xi : {x, x.toFormat(MemoryFormat::channels_last)}) {
      Tensor gy = hostRandom(out_shape(xi.shape()), t, 2);
      if (xi.isChannelsLast()) gy = gy.toFormat(MemoryFormat::channels_last);
      v.push_back({{xi, gy}});
    }
    return v;
  };
}

// Pooling rounds once (a max is exact; a mean of a few values is computed in f32): against the f64
// oracle on the same numbers.
std::vector<OpCase> poolCases() {
  std::vector<OpCase> cases;
  auto poolTol = [](const Tensor& want, const Inputs&, size_t) {
    return lockstep::testing::tolFor(want.dtype(), OpClass::pool);
  };
  for (const auto& [name, p] : poolParams()) {
    auto inputs = poolInputs([p = p](const Shape& s) { return kernels::pool2dOutputShape(s, p, "pool"); });
    cases.push_back(
        {"max_pool2d " + name,
         [p = p](const Inputs& in) { return Operands{kernels::maxPool2dForward(in.x[0], p, true).y}; },
         inputs, Against::oracle, Layout::keeps_channels_last, poolTol});
    cases.push_back({"max_pool2d backward " + name,
                     [p = p](const Inputs& in) {
                       const Tensor workspace = kernels::maxPool2dForward(in.x[0], p, true).workspace;
                       return Operands{kernels::maxPool2dBackward(in.x[1], in.x[0], workspace, p)};
                     },
                     inputs, Against::oracle, Layout::any, poolTol});
    // Without a workspace (evaluation) the GPU finds the maxima again from x; the CPU kernels, which
    // need one, give what it must find.
    cases.push_back({"max_pool2d backward without workspace " + name,
                     [p = p](const Inputs& in) {
                       const Tensor workspace = in.x[0].isCuda()
                                                    ? Tensor()
                                                    : kernels::maxPool2dForward(in.x[0], p, true).workspace;
                       return Operands{kernels::maxPool2dBackward(in.x[1], in.x[0], workspace, p)};
                     },
                     inputs, Against::oracle, Layout::any, poolTol});
    cases.push_back({"avg_pool2d " + name,
                     [p = p](const Inputs& in) { return Operands{kernels::avgPool2dForward(in.x[0], p)}; },
                     inputs, Against::oracle, Layout::keeps_channels_last, poolTol});
    cases.push_back(
        {"avg_pool2d backward " + name,
         [p = p](const Inputs& in) { return Operands{kernels::avgPool2dBackward(in.x[1], in.x[0], p)}; },
         inputs, Against::oracle, Layout::keeps_channels_last, poolTol});
  }
  for (std::array<int64_t, 2> o : {std::array<int64_t, 2>{1, 1}, {3, 4}, {5, 7}, {9, 11}, {12, 13}}) {
    const std::string name = "adaptive_avg_pool2d to " + std::to_string(o[0]) + "x" + std::to_string(o[1]);
    auto inputs = poolInputs([o](const Shape& s) { return Shape{s[0], s[1], o[0], o[1]}; });
    cases.push_back(
        {name, [o](const Inputs& in) { return Operands{kernels::adaptiveAvgPool2dForward(in.x[0], o)}; },
         inputs, Against::oracle, Layout::any, poolTol});
    cases.push_back(
        {name + " backward",
         [o](const Inputs& in) { return Operands{kernels::adaptiveAvgPool2dBackward(in.x[1], in.x[0], o)}; },
         inputs, Against::oracle, Layout::any, poolTol});
  }
  return cases;
}

// Dropout draws the host's Philox mask: the GPU gives the CPU's mask, values and generator advance
// (bitwise), and its backward scales by the mask.
std::vector<OpCase> dropoutCases() {
  std::vector<OpCase> cases;
  auto inputs = [](DType t) {
    Tensor x = hostRandom({37, 129}, t, 3).transpose(0, 1);  // non-contiguous: row-major draws
    return std::vector<Inputs>{{{x, hostRandom(x.shape(), t, 5)}}};
  };
  for (double p : {0.0, 0.1, 0.5, 0.9, 1.0}) {
    auto forward = [p](const Tensor& x) {
      Generator gen(1234);
      gen.setState(1234, 77);
      auto [y, mask] = kernels::dropoutForward(x, p, gen);
      return std::tuple{y, mask, Tensor::scalar(static_cast<double>(gen.offset()), DType::i64, x.device())};
    };
    const std::string name = "dropout " + std::to_string(p);
    cases.push_back({name,
                     [forward](const Inputs& in) {
                       auto [y, mask, offset] = forward(in.x[0]);
                       return Operands{y, mask, offset};
                     },
                     inputs, Against::cpu, Layout::any, exact});
    cases.push_back({name + " backward",
                     [forward, p](const Inputs& in) {
                       return Operands{kernels::dropoutBackward(in.x[1], std::get<1>(forward(in.x[0])), p)};
                     },
                     inputs, Against::cpu, Layout::any, exact});
  }
  return cases;
}

// ---- normalisation: layer norm, RMSNorm, batch norm ----

// Row and column reductions (norm statistics and gradients, the embedding's scatter-add) add in
// another order than the CPU: f32 and f64 get a margin for that. bf16/f16 compute in f32 on both
// sides and round once, so tolFor's rounding margin stands.
Tol accumTol(const Tensor& want, const Inputs&, size_t) {
  switch (want.dtype()) {
    case DType::f64:
      return {1e-11, 1e-10};
    case DType::f32:
      return {1e-5, 1e-4};
    default:
      return lockstep::testing::tolFor(want.dtype());
  }
}

// Short rows (a warp), many rows, a block-wide row, 1-D x, a transposed x (rows not contiguous):
// {draw shape, normalized shape, transposed}.
struct NormShape {
  Shape shape, normalized;
  bool transposed;
};
// {1000, 40}: layer norm's column sums over several chunks of rows and a part-filled column tile.
const NormShape kNormShapes[] = {
    {{4, 7}, {7}, false},
    {{2, 3, 5}, {3, 5}, false},
    {{256, 32}, {32}, false},
    {{3, 4096}, {4096}, false},
    {{9}, {9}, false},
    {{64, 6}, {64}, true},
    {{1000, 40}, {40}, false},
    // The weight gradients' column sums with several rows a thread, a part-filled last column tile
    // and an empty last chunk of rows (column_sums.cuh: 17 tiles, 60 chunks of 26 rows).
    {{1510, 520}, {520}, false}};

Tensor normInput(const NormShape& s, DType t, uint64_t seed, double low, double high) {
  Tensor x = hostRandom(s.shape, t, seed, low, high);
  return s.transposed ? x.transpose(0, 1) : x;
}

// Layer norm: {x, weight, bias, gy, the CPU's mean, the CPU's variance} over `dims` (the normalized
// shape), with each of weight and bias present or not. x is shifted off zero, so the variance is not
// computed around a mean of ~0.
std::vector<Inputs> layerNormInputs(DType t) {
  std::vector<Inputs> v;
  for (const NormShape& s : kNormShapes) {
    for (auto [weight, bias] : {std::pair{true, true}, {false, false}, {true, false}, {false, true}}) {
      Tensor x = normInput(s, t, 1, -1.0, 3.0);
      Tensor w = weight ? hostRandom(s.normalized, t, 2, 0.5, 1.5) : Tensor();
      Tensor b = bias ? hostRandom(s.normalized, t, 3) : Tensor();
      auto stats = kernels::layerNormForward(x, s.normalized, w, b, 1e-5);
      v.push_back({{x, w, b, hostRandom(x.shape(), t, 4), stats.mean, stats.variance}, 0, s.normalized});
    }
  }
  return v;
}

// RMSNorm over the last dim: {x, weight or none, gy, the CPU's rstd}.
std::vector<Inputs> rmsNormInputs(DType t) {
  std::vector<Inputs> v;
  for (const NormShape& s : kNormShapes) {
    for (bool weight : {true, false}) {
      Tensor x = normInput(s, t, 5, -2.0, 2.0);
      Tensor w = weight ? hostRandom({x.shape().back()}, t, 6, 0.5, 1.5) : Tensor();
      v.push_back({{x, w, hostRandom(x.shape(), t, 7), kernels::rmsNormForward(x, w, 1e-6).rstd}});
    }
  }
  return v;
}

// Batch norm: {x, weight, bias, running mean, running variance, gy} with and without the affine
// parameters, NCHW and channels-last x (gy in the other layout: a gradient may arrive so), x with
// an offset so the statistics are not trivially 0 and 1/3. Two shapes: [4, 3, 5, 7], which the GPU
// kernels walk an element at a time, and [4, 16, 4, 6], whose channels (NHWC) and planes (NCHW)
// they walk in 16-byte packs; a bf16/f16 x also with f32 parameters and running statistics (the
// mixed batch norm of autocast).
std::vector<Inputs> batchNormInputs(DType t) {
  std::vector<Inputs> v;
  for (const Shape& shape : {Shape{4, 3, 5, 7}, Shape{4, 16, 4, 6}}) {
    const int64_t C = shape[1];
    const bool low = t == DType::bf16 || t == DType::f16;
    for (DType pt : low ? std::vector<DType>{t, DType::f32} : std::vector<DType>{t}) {
      for (bool cl : {false, true}) {
        for (bool affine : {true, false}) {
          Tensor x = hostRandom(shape, t, 1, -2.0, 3.0), gy = hostRandom(shape, t, 15);
          if (cl) x = x.toFormat(MemoryFormat::channels_last);
          if (!cl) gy = gy.toFormat(MemoryFormat::channels_last);
          v.push_back(
              {{x, affine ? hostRandom({C}, pt, 2) : Tensor(), affine ? hostRandom({C}, pt, 3) : Tensor(),
                hostRandom({C}, pt, 4), hostRandom({C}, pt, 5, 0.5, 2.0), gy}});
        }
      }
    }
  }
  return v;
}

std::vector<OpCase> normCases() {
  std::vector<OpCase> cases;
  cases.push_back({"layer_norm",
                   [](const Inputs& in) {
                     auto r = kernels::layerNormForward(in.x[0], in.dims, in.x[1], in.x[2], 1e-5);
                     return Operands{r.y, r.mean, r.variance};
                   },
                   layerNormInputs, Against::cpu, Layout::any, accumTol});
  // Both sides from the CPU's statistics: a forward error does not show up here.
  cases.push_back({"layer_norm backward",
                   [](const Inputs& in) {
                     auto g = kernels::layerNormBackward(in.x[3], in.x[0], in.x[4], in.x[5], in.dims, in.x[1],
                                                         in.x[2], 1e-5);
                     return Operands{g.gx, g.gweight, g.gbias};
                   },
                   layerNormInputs, Against::cpu, Layout::any, accumTol});
  // Autocast's LayerNorm before a linear layer (autograd::layerNormLowered): y written in bf16 / f16
  // (an f32 x's kernels round it once; other dtypes through a cast), and the gradient read in it.
  for (DType low : {DType::bf16, DType::f16}) {
    const std::string name = std::string("layer_norm to ") + dtypeName(low);
    cases.push_back({name,
                     [low](const Inputs& in) {
                       return Operands{
                           kernels::layerNormForward(in.x[0], in.dims, in.x[1], in.x[2], 1e-5, low).y};
                     },
                     layerNormInputs, Against::cpu, Layout::any, accumTol});
    cases.push_back({name + " backward",
                     [low](const Inputs& in) {
                       auto g = kernels::layerNormBackward(in.x[3].to(low), in.x[0], in.x[4], in.x[5],
                                                           in.dims, in.x[1], in.x[2], 1e-5);
                       return Operands{g.gx, g.gweight, g.gbias};
                     },
                     layerNormInputs, Against::cpu, Layout::any, accumTol});
  }
  cases.push_back({"rms_norm",
                   [](const Inputs& in) {
                     auto r = kernels::rmsNormForward(in.x[0], in.x[1], 1e-6);
                     return Operands{r.y, r.rstd};
                   },
                   rmsNormInputs, Against::cpu, Layout::any, accumTol});
  cases.push_back({"rms_norm backward",
                   [](const Inputs& in) {
                     auto g = kernels::rmsNormBackward(in.x[2], in.x[0], in.x[3], in.x[1]);
                     return Operands{g.gx, g.gweight};
                   },
                   rmsNormInputs, Against::cpu, Layout::any, accumTol});
  // Autocast's RMSNorm before its linear layers (autograd::rmsNormLowered), as layer_norm's above.
  for (DType low : {DType::bf16, DType::f16}) {
    const std::string name = std::string("rms_norm to ") + dtypeName(low);
    cases.push_back(
        {name,
         [low](const Inputs& in) { return Operands{kernels::rmsNormForward(in.x[0], in.x[1], 1e-6, low).y}; },
         rmsNormInputs, Against::cpu, Layout::any, accumTol});
    cases.push_back({name + " backward",
                     [low](const Inputs& in) {
                       auto g = kernels::rmsNormBackward(in.x[2].to(low), in.x[0], in.x[3], in.x[1]);
                       return Operands{g.gx, g.gweight};
                     },
                     rmsNormInputs, Against::cpu, Layout::any, accumTol});
  }
  // Batch norm against the f64 oracle on the same numbers: y and the running statistics, updated
  // in place in their own dtype in training and left as they are in evaluation (here on copies, so
  // that every run starts from the same ones); in training also the batch statistics (f32 or f64
  // sums of the same inputs).
  auto bn_tol = [](const Tensor& want, const Inputs&, size_t result) {
    if (result >= 3) return Tol{1e-6, 1e-6};
    return lockstep::testing::tolFor(want.dtype(), OpClass::batch_norm);
  };
  for (bool training : {true, false}) {
    kernels::BatchNormParams p;
    p.training = training;
    p.momentum = 0.3;
    const std::string mode = training ? " training" : " eval";
    cases.push_back({"batch_norm2d" + mode,
                     [p](const Inputs& in) {
                       Tensor rm = in.x[3].clone(), rv = in.x[4].clone();
                       auto r = kernels::batchNorm2dForward(in.x[0], in.x[1], in.x[2], rm, rv, p);
                       if (!p.training) return Operands{r.y, rm, rv};
                       return Operands{r.y, rm, rv, r.mean, r.var};
                     },
                     batchNormInputs, Against::oracle, Layout::keeps_channels_last, bn_tol});
    // Each side from its own forward's statistics; the bias gradient's sums over 140 (96) values
    // per channel, rounded once, get ten times the margin.
    cases.push_back({"batch_norm2d backward" + mode,
                     [p](const Inputs& in) {
                       auto r = kernels::batchNorm2dForward(in.x[0], in.x[1], Tensor(), in.x[3].clone(),
                                                            in.x[4].clone(), p);
                       const bool affine = in.x[1].defined();
                       auto g =
                           kernels::batchNorm2dBackward(in.x[5], in.x[0], in.x[1], affine, r.mean, r.var, p);
                       return Operands{g.x, g.weight, g.bias};
                     },
                     batchNormInputs, Against::oracle, Layout::keeps_channels_last,
                     [](const Tensor& want, const Inputs&, size_t result) {
                       Tol tol = lockstep::testing::tolFor(want.dtype(), OpClass::batch_norm);
                       if (result > 0) tol.atol *= 10;
                       return tol;
                     }});
    // A ResNet block's tail, y = relu(bn(x) + residual), and its gradients (the residual's too):
    // fused into the normalisation's passes on the GPU, composed on the CPU. The residual is the
    // inputs' gy (the other layout), the gradient x itself.
    cases.push_back({"batch_norm2d relu residual" + mode,
                     [p](const Inputs& in) {
                       kernels::BatchNormParams q = p;
                       q.relu = true;
                       auto r = kernels::batchNorm2dForward(in.x[0], in.x[1], in.x[2], in.x[3].clone(),
                                                            in.x[4].clone(), q, in.x[5]);
                       auto g = kernels::batchNorm2dBackward(in.x[0], in.x[0], in.x[1], in.x[2].defined(),
                                                             r.mean, r.var, q, r.y, true);
                       return Operands{r.y, g.x, g.weight, g.bias, g.residual};
                     },
                     batchNormInputs, Against::oracle, Layout::keeps_channels_last,
                     [](const Tensor& want, const Inputs&, size_t result) {
                       Tol tol = lockstep::testing::tolFor(want.dtype(), OpClass::batch_norm);
                       if (result == 2 || result == 3) tol.atol *= 10;
                       return tol;
                     }});
  }
  return cases;
}

// ---- GEMMs and convolutions: cuBLASLt and cuDNN against the f64 oracle on the same numbers ----
// (f32 at gemm's 1e-4 also shows that no TF32, 10-bit mantissa, is used.)

Tol gemmTol(const Tensor& want, const Inputs&, size_t) {
  return lockstep::testing::tolFor(want.dtype(), OpClass::gemm);
}

std::vector<OpCase> gemmCases() {
  std::vector<OpCase> cases;
  // {x, weight, bias or none}: odd sizes, batched x, 1-D x, no bias, 1 x 1, one output.
  auto linear_inputs = [](DType t) {
    std::vector<Inputs> v;
    const std::tuple<Shape, Shape, bool> shapes[] = {{{7, 13}, {5, 13}, true}, {{2, 3, 33}, {17, 33}, true},
                                                     {{13}, {5, 13}, true},    {{64, 128}, {96, 128}, false},
                                                     {{1, 1}, {1, 1}, true},   {{9, 3}, {1, 3}, false}};
    for (const auto& [xs, ws, bias] : shapes) {
      v.push_back(
          {{hostRandom(xs, t, 1), hostRandom(ws, t, 2), bias ? hostRandom({ws[0]}, t, 3) : Tensor()}});
    }
    // x and the weight as transposes (column-major operands).
    v.push_back({{hostRandom({13, 7}, t, 7).transpose(0, 1), hostRandom({13, 5}, t, 8).transpose(0, 1),
                  hostRandom({5}, t, 10)}});
    return v;
  };
  cases.push_back(
      {"linear", [](const Inputs& in) { return Operands{kernels::linearForward(in.x[0], in.x[1], in.x[2])}; },
       linear_inputs, Against::oracle, Layout::any, gemmTol});
  // {x, weight, gy}.
  auto linear_backward_inputs = [](DType t) {
    std::vector<Inputs> v;
    for (const Shape& xs : {Shape{7, 13}, Shape{2, 5, 31}}) {
      Shape ys = xs;
      ys.back() = 11;
      v.push_back({{hostRandom(xs, t, 4), hostRandom({11, xs.back()}, t, 5), hostRandom(ys, t, 6)}});
    }
    return v;
  };
  cases.push_back({"linear backward",
                   [](const Inputs& in) {
                     auto [gw, gb] = kernels::linearBackwardWeights(in.x[2], in.x[0], true);
                     return Operands{kernels::linearBackwardData(in.x[2], in.x[1]), gw, gb,
                                     kernels::linearBackwardWeights(in.x[2], in.x[0], false).second};
                   },
                   linear_backward_inputs, Against::oracle, Layout::any, gemmTol});
  // Broadcast batches on both sides, a shared b (one GEMM over the batch), a shared a (stride-0
  // batch), 1 x 1, a batch of odd sizes, a permuted a whose batch does not collapse.
  auto matmul_inputs = [](DType t) {
    std::vector<Inputs> v;
    const std::pair<Shape, Shape> shapes[] = {{{2, 1, 5, 7}, {3, 7, 4}},
                                              {{4, 9, 6}, {6, 3}},
                                              {{6, 3}, {4, 3, 5}},
                                              {{1, 1}, {1, 1}},
                                              {{3, 33, 65}, {3, 65, 17}}};
    for (const auto& [as, bs] : shapes) v.push_back({{hostRandom(as, t, 15), hostRandom(bs, t, 16)}});
    v.push_back({{hostRandom({5, 2, 3, 4}, t, 17).permute({1, 0, 3, 2}), hostRandom({2, 5, 3, 6}, t, 18)}});
    return v;
  };
  cases.push_back({"matmul", [](const Inputs& in) { return Operands{kernels::matmul(in.x[0], in.x[1])}; },
                   matmul_inputs, Against::oracle, Layout::any, gemmTol});
  // Equal batch shapes, and a shared 2-d b (one GEMM over the flattened batch): {a, b, gy}.
  auto matmul_backward_inputs = [](DType t) {
    std::vector<Inputs> v;
    for (auto [as, bs] : {std::pair<Shape, Shape>{{3, 5, 7}, {3, 7, 4}}, {{2, 3, 5, 7}, {7, 4}}}) {
      Shape ys = as;
      ys.back() = bs.back();
      v.push_back({{hostRandom(as, t, 19), hostRandom(bs, t, 20), hostRandom(ys, t, 21)}});
    }
    return v;
  };
  cases.push_back({"matmul backward",
                   [](const Inputs& in) {
                     auto [ga, gb] = kernels::matmulBackward(in.x[2], in.x[0], in.x[1], true, true);
                     return Operands{ga, gb};
                   },
                   matmul_backward_inputs, Against::oracle, Layout::any, gemmTol});
  return cases;
}

// Convolutions: padding 1 with a bias; stride, padding, dilation and two groups; depthwise; a
// kernel as large as the image. x in NCHW and channels-last, gy in x's layout and in the other.
struct ConvShape {
  Shape x, w;
  kernels::Conv2dParams p;
  bool bias;
};
std::vector<ConvShape> convShapes() {
  kernels::Conv2dParams same, mixed, depthwise;
  same.padding = {1, 1};
  mixed.stride = {2, 1};
  mixed.padding = {1, 0};
  mixed.dilation = {1, 2};
  mixed.groups = 2;
  depthwise.groups = 6;
  depthwise.padding = {1, 1};
  return {{{2, 3, 9, 9}, {8, 3, 3, 3}, same, true},
          {{3, 4, 10, 7}, {6, 2, 3, 2}, mixed, true},
          {{2, 6, 8, 8}, {6, 1, 3, 3}, depthwise, false},
          {{1, 1, 5, 5}, {2, 1, 5, 5}, kernels::Conv2dParams{}, true}};
}

// {x, weight, bias or none, gy in x's layout, gy in the other}.
std::function<std::vector<Inputs>(DType)> convInputs(const ConvShape& c) {
  return [c](DType t) {
    std::vector<Inputs> v;
    for (bool cl : {false, true}) {
      Tensor x = hostRandom(c.x, t, 1), gy = hostRandom(kernels::conv2dOutputShape(c.x, c.w, c.p), t, 9);
      const MemoryFormat mine = cl ? MemoryFormat::channels_last : MemoryFormat::contiguous,
                         other = cl ? MemoryFormat::contiguous : MemoryFormat::channels_last;
      v.push_back({{x.toFormat(mine), hostRandom(c.w, t, 2), c.bias ? hostRandom({c.w[0]}, t, 3) : Tensor(),
                    gy.toFormat(mine), gy.toFormat(other)}});
    }
    return v;
  };
}

// cuDNN's layout: NHWC in, NHWC out (f64: NCHW); a contiguous x, or C = 1, computes in NCHW.
bool convLayout(const Tensor& got, const Inputs& in, size_t) {
  const Tensor& x = in.x[0];
  if (x.isChannelsLast() && x.size(1) > 1 && x.dtype() != DType::f64) return got.isChannelsLast();
  return got.isContiguous();
}

std::vector<OpCase> convCases() {
  std::vector<OpCase> cases;
  auto conv_tol = [](const Tensor& want, const Inputs&, size_t) {
    return lockstep::testing::tolFor(want.dtype(), OpClass::conv);
  };
  for (const ConvShape& c : convShapes()) {
    const std::string name = "conv2d " + shapeToString(c.x) + " * " + shapeToString(c.w);
    OpCase forward{name,
                   [p = c.p](const Inputs& in) {
                     return Operands{kernels::conv2dForward(in.x[0], in.x[1], in.x[2], p)};
                   },
                   convInputs(c),
                   Against::oracle,
                   Layout::rule,
                   conv_tol};
    forward.layout_rule = convLayout;
    cases.push_back(forward);
    OpCase data{name + " data gradient",
                [p = c.p](const Inputs& in) {
                  return Operands{kernels::conv2dBackwardData(in.x[3], in.x[0], in.x[1], p)};
                },
                convInputs(c),
                Against::oracle,
                Layout::rule,
                conv_tol};
    data.layout_rule = convLayout;
    cases.push_back(data);
    // The weight gradient from a gy in the other layout than x; sums over N * oh * ow products get
    // four times the absolute margin.
    cases.push_back(
        {name + " weight gradient",
         [c](const Inputs& in) {
           auto g = kernels::conv2dBackwardWeights(in.x[4], in.x[0], c.w, c.bias, c.p);
           return Operands{g.weight, g.bias};
         },
         convInputs(c), Against::oracle, Layout::rule,
         [](const Tensor& want, const Inputs&, size_t) {
           Tol tol = lockstep::testing::tolFor(want.dtype(), OpClass::conv);
           tol.atol *= 4;
           return tol;
         },
         [](const Tensor& got, const Inputs&, size_t result) { return result != 0 || got.isContiguous(); }});
  }
  return cases;
}

// ---- the transformer's own kernels: embedding, SwiGLU, rotary, attention ----

// 512 indices over rows 0..9 of 11 (about 51 repeats each; row 10 never indexed), as given and as
// a transposed view.
std::vector<Tensor> embeddingIndices() {
  std::vector<int64_t> ix(8 * 64);
  for (size_t i = 0; i < ix.size(); ++i) ix[i] = static_cast<int64_t>((i * 7 + 3) % 10);
  const Tensor indices = Tensor::fromVector(ix, {8, 64});
  return {indices, indices.transpose(0, 1)};
}

std::vector<OpCase> transformerCases() {
  std::vector<OpCase> cases;
  // A gather moves bits: exactly the CPU's rows. {weight [11, d], indices}.
  cases.push_back({"embedding",
                   [](const Inputs& in) { return Operands{kernels::embeddingForward(in.x[0], in.x[1])}; },
                   [](DType t) {
                     std::vector<Inputs> v;
                     for (int64_t d : {5, 64, 300}) {
                       for (const Tensor& ix : embeddingIndices())
                         v.push_back({{hostRandom({11, d}, t, 1), ix}});
                     }
                     return v;
                   },
                   Against::cpu, Layout::any, exact});
  // The scatter-add accumulates in f32 (f64) and rounds once on both sides. {gy, indices}, the
  // padding row in `dim` (-1: none).
  cases.push_back(
      {"embedding backward",
       [](const Inputs& in) { return Operands{kernels::embeddingBackward(in.x[0], in.x[1], 11, in.dim)}; },
       [](DType t) {
         std::vector<Inputs> v;
         const Tensor ix = embeddingIndices()[0];
         for (int64_t d : {5, 64, 300}) {
           for (int64_t pad : {-1, 0, 4}) v.push_back({{hostRandom({8, 64, d}, t, 2), ix}, pad});
         }
         return v;
       },
       Against::cpu, Layout::any, accumTol});
  // silu's exp: against the f64 oracle. {gate, up, gy}: a short row, many rows, transposed views.
  auto swiglu_inputs = [](DType t) {
    std::vector<Inputs> v;
    for (auto [shape, transposed] :
         {std::pair<Shape, bool>{{3, 41}, false}, {{257, 129}, false}, {{129, 70}, true}}) {
      auto draw = [&](uint64_t seed, double low, double high) {
        Tensor x = hostRandom(shape, t, seed, low, high);
        return transposed ? x.transpose(0, 1) : x;
      };
      Tensor gate = draw(8, -6.0, 6.0);
      v.push_back({{gate, draw(9, -1.0, 1.0), hostRandom(gate.shape(), t, 10)}});
    }
    return v;
  };
  cases.push_back({"swiglu",
                   [](const Inputs& in) { return Operands{kernels::swigluForward(in.x[0], in.x[1])}; },
                   swiglu_inputs, Against::oracle, Layout::contiguous});
  cases.push_back({"swiglu backward",
                   [](const Inputs& in) {
                     auto [ggate, gup] = kernels::swigluBackward(in.x[2], in.x[0], in.x[1]);
                     return Operands{ggate, gup};
                   },
                   swiglu_inputs, Against::oracle});
  // Rotary: [B, T, H, D] seen as [B, H, T, D] (the attention's q and k) for D 8, 64 and 128, and a
  // plain [B, T, D]; tables in f32 (Llama's, whatever the activations) and in x's dtype.
  // {x, cos, sin, gy}.
  auto rotary_inputs = [](DType t) {
    std::vector<Inputs> v;
    const std::pair<Shape, bool> shapes[] = {
        {{2, 37, 3, 8}, true}, {{2, 37, 3, 64}, true}, {{1, 5, 4, 128}, true}, {{3, 37, 100}, false}};
    for (const auto& [shape, heads] : shapes) {
      auto view = [heads = heads](const Tensor& base) { return heads ? base.transpose(1, 2) : base; };
      Tensor x = view(hostRandom(shape, t, 11)), gy = view(hostRandom(shape, t, 12));
      const int64_t T = x.size(x.dim() - 2), D = x.size(x.dim() - 1);
      for (DType table : {DType::f32, t}) {
        v.push_back({{x, hostRandom({T, D / 2}, table, 13), hostRandom({T, D / 2}, table, 14), gy}});
      }
    }
    return v;
  };
  cases.push_back(
      {"rotary", [](const Inputs& in) { return Operands{kernels::rotaryForward(in.x[0], in.x[1], in.x[2])}; },
       rotary_inputs, Against::cpu, Layout::contiguous});
  cases.push_back(
      {"rotary backward",
       [](const Inputs& in) { return Operands{kernels::rotaryBackward(in.x[3], in.x[1], in.x[2])}; },
       rotary_inputs, Against::cpu});
  return cases;
}

// T past a 64-row block, GQA (H 4, Hkv 2), T < S and T > S, one query, D in {8, 32, 64, 100, 128}:
// {q [B, H, T, D], k, v [B, Hkv, S, D], gout, the CPU forward's out and logsumexp}.
std::function<std::vector<Inputs>(DType)> attentionInputs(kernels::AttentionParams p) {
  return [p](DType t) {
    struct Dims {
      int64_t b, h, hkv, t, s, d;
    };
    const Dims dims[] = {{2, 2, 2, 37, 37, 8},   {1, 4, 2, 70, 70, 64},   {2, 2, 1, 130, 200, 32},
                         {2, 2, 2, 33, 65, 100}, {1, 4, 2, 129, 50, 128}, {1, 4, 2, 1, 70, 64}};
    std::vector<Inputs> v;
    for (const Dims& c : dims) {
      Tensor q = hostRandom({c.b, c.h, c.t, c.d}, t, 1, -2.0, 2.0);
      Tensor k = hostRandom({c.b, c.hkv, c.s, c.d}, t, 2, -2.0, 2.0),
             val = hostRandom({c.b, c.hkv, c.s, c.d}, t, 3);
      kernels::AttentionParams pd = p;
      pd.scale = 1.0 / std::sqrt(static_cast<double>(c.d));
      auto fwd = kernels::attentionForward(q, k, val, pd);
      v.push_back({{q, k, val, hostRandom(q.shape(), t, 4), fwd.out, fwd.lse}});
    }
    return v;
  };
}

std::vector<OpCase> attentionCases() {
  std::vector<OpCase> cases;
  for (bool causal : {false, true}) {
    kernels::AttentionParams p;
    p.causal = causal;
    p.seed = 1234;
    p.offset = 77;
    const std::string name = causal ? "attention causal" : "attention";
    auto params = [p](const Inputs& in) {
      kernels::AttentionParams pd = p;
      pd.scale = 1.0 / std::sqrt(static_cast<double>(in.x[0].size(3)));
      return pd;
    };
    cases.push_back({name,
                     [params](const Inputs& in) {
                       return Operands{kernels::attentionForward(in.x[0], in.x[1], in.x[2], params(in)).out};
                     },
                     attentionInputs(p), Against::cpu, Layout::contiguous,
                     [](const Tensor& want, const Inputs&, size_t) {
                       return lockstep::testing::tolFor(want.dtype(), OpClass::attention);
                     }});
    // The logsumexp is f32 (f64) for every input dtype: scores of the same rounded inputs.
    cases.push_back({name + " logsumexp",
                     [params](const Inputs& in) {
                       return Operands{kernels::attentionForward(in.x[0], in.x[1], in.x[2], params(in)).lse};
                     },
                     attentionInputs(p), Against::cpu, Layout::any,
                     [](const Tensor& want, const Inputs&, size_t) {
                       return want.dtype() == DType::f64 ? Tol{1e-10, 1e-10} : Tol{2e-5, 2e-5};
                     }});
    // Both sides from the CPU's forward: a forward error does not show up here. Gradients grow with
    // S and with the query heads sharing a kv head: atol in units of the largest.
    cases.push_back({name + " backward",
                     [params](const Inputs& in) {
                       auto g = kernels::attentionBackward(in.x[3], in.x[0], in.x[1], in.x[2], in.x[4],
                                                           in.x[5], params(in));
                       return Operands{g.gq, g.gk, g.gv};
                     },
                     attentionInputs(p), Against::cpu, Layout::contiguous,
                     [](const Tensor& want, const Inputs&, size_t) {
                       Tol tol = lockstep::testing::tolFor(want.dtype(), OpClass::attention);
                       double largest = 0;
                       for (double x : want.toVector<double>()) largest = std::max(largest, std::abs(x));
                       tol.atol *= std::max(1.0, largest);
                       return tol;
                     }});
  }
  return cases;
}

// ---- optimizer updates: the same IEEE operations in the same order as the CPU loops, bitwise ----

// A flat span over buffers (param, grad, then the optimizer's state) on their own device.
void* bufferPtr(const Tensor& t) { return t.isCuda() ? t.devicePtr() : t.dataPtr(); }

// {param, grad, state...} in f32 and f64: exp_avg_sq and max_exp_avg_sq (buffers 3 and 4) >= 0.
std::function<std::vector<Inputs>(DType)> optimizerInputs(int64_t n, int buffers) {
  return [n, buffers](DType t) -> std::vector<Inputs> {
    if (!isFloating(t)) return {};  // bf16 and f16: f32 arithmetic on 16-bit storage
    Operands x;
    for (int k = 0; k < buffers; ++k)
      x.push_back(k >= 3 ? hostRandom({n}, t, 1 + k, 0.0, 0.01) : hostRandom({n}, t, 1 + k));
    return {{x}};
  };
}

// Three steps on copies of the buffers; the results are the buffers after them.
std::vector<OpCase> optimizerCases() {
  std::vector<OpCase> cases;
  for (int f = 0; f < 16; ++f) {
    kernels::SgdParams p;
    p.lr = 0.05;
    p.momentum = f & 1 ? 0.9 : 0.0;
    p.dampening = f & 1 ? 0.1 : 0.0;
    p.nesterov = (f & 2) && (f & 1);
    p.weight_decay = f & 4 ? 1e-2 : 0.0;
    p.maximize = f & 8;
    const std::string name = "sgd momentum " + std::to_string(p.momentum) + (p.nesterov ? " nesterov" : "") +
                             " weight_decay " + std::to_string(p.weight_decay) +
                             (p.maximize ? " maximize" : "");
    cases.push_back({name,
                     [p](const Inputs& in) {
                       Operands b;
                       for (const Tensor& x : in.x) b.push_back(x.clone());
                       kernels::SgdSpan s;
                       s.param = bufferPtr(b[0]);
                       s.grad = bufferPtr(b[1]);
                       s.momentum_buffer = bufferPtr(b[2]);
                       s.numel = b[0].numel();
                       s.dtype = b[0].dtype();
                       s.device = b[0].device();
                       for (int step = 0; step < 3; ++step) {
                         kernels::SgdParams ps = p;
                         ps.first_step = step == 0;
                         kernels::sgdStep(s, ps);
                       }
                       return b;
                     },
                     optimizerInputs(1000003, 3), Against::cpu, Layout::any, exact});
  }
  for (int f = 0; f < 16; ++f) {
    kernels::AdamParams p;
    p.lr = 3e-3;
    p.weight_decay = f & 1 ? 0.05 : 0.0;
    p.decoupled_weight_decay = f & 2;
    p.amsgrad = f & 4;
    p.maximize = f & 8;
    const std::string name = std::string(p.decoupled_weight_decay ? "adamw" : "adam") + " weight_decay " +
                             std::to_string(p.weight_decay) + (p.amsgrad ? " amsgrad" : "") +
                             (p.maximize ? " maximize" : "");
    cases.push_back({name,
                     [p](const Inputs& in) {
                       Operands b;
                       for (const Tensor& x : in.x) b.push_back(x.clone());
                       kernels::AdamSpan s;
                       s.param = bufferPtr(b[0]);
                       s.grad = bufferPtr(b[1]);
                       s.exp_avg = bufferPtr(b[2]);
                       s.exp_avg_sq = bufferPtr(b[3]);
                       s.max_exp_avg_sq = bufferPtr(b[4]);
                       s.numel = b[0].numel();
                       s.dtype = b[0].dtype();
                       s.device = b[0].device();
                       for (int step = 1; step <= 3; ++step) {
                         kernels::AdamParams ps = p;
                         ps.step = step;
                         kernels::adamStep(s, ps);
                       }
                       return b;
                     },
                     optimizerInputs(4099, 5), Against::cpu, Layout::any, exact});
  }
  return cases;
}

std::vector<OpCase> opCases() {
  std::vector<OpCase> cases;
  for (auto group : {elementwiseCases, reduceCases, lossCases, poolCases, dropoutCases, normCases, gemmCases,
                     convCases, transformerCases, attentionCases, optimizerCases}) {
    for (OpCase& c : group()) cases.push_back(std::move(c));
  }
  return cases;
}

void runCase(const OpCase& c) {
  for (DType t : kFloatDTypes) {
    for (const Inputs& in : c.inputs(t)) {
      std::string what = c.name + " " + dtypeName(t) + " dim " + std::to_string(in.dim);
      for (const Tensor& x : in.x) what += " " + (x.defined() ? x.describe() : std::string("none"));
      const Operands got = c.run(onDevice(in));
      const Operands cpu = c.run(in);
      Operands want = cpu;
      if (c.against == Against::oracle) {
        want = c.run(widened(in));
        for (size_t i = 0; i < want.size() && i < cpu.size(); ++i) {
          if (want[i].defined()) want[i] = oracle(want[i], cpu[i].dtype());
        }
      }
      ASSERT_EQ(got.size(), want.size()) << what;
      for (size_t i = 0; i < got.size(); ++i) {
        if (!want[i].defined()) {
          EXPECT_FALSE(got[i].defined()) << what << ": result " << i << " should be undefined";
          continue;
        }
        ASSERT_TRUE(got[i].defined()) << what << ": result " << i << " undefined";
        EXPECT_TRUE(gpuMatches(got[i], want[i], c.tol(want[i], in, i), what));
        if (c.layout == Layout::rule) {
          EXPECT_TRUE(c.layout_rule(got[i], in, i))
              << what << ": result " << i << " has strides " << shapeToString(got[i].strides());
          continue;
        }
        if (c.layout == Layout::contiguous) {
          EXPECT_TRUE(got[i].isContiguous()) << what;
          continue;
        }
        if (c.layout == Layout::keeps_channels_last) {
          if (in.x[0].isChannelsLast() && got[i].dim() == 4) {
            EXPECT_TRUE(got[i].isChannelsLast()) << what;
          }
          continue;
        }
        if (c.layout != Layout::any) {
          EXPECT_EQ(got[i].strides(), cpu[i].strides()) << what;
        }
        if (c.layout == Layout::cpu_input) {
          EXPECT_EQ(got[i].strides(), in.x[0].strides()) << what;
        }
      }
    }
  }
}

}  // namespace

TEST(GpuOps, every_case_matches_the_cpu_or_the_f64_oracle) {
  LOCKSTEP_REQUIRE_GPU();
  for (const OpCase& c : opCases()) {
    SCOPED_TRACE(c.name);
    runCase(c);
  }
}

// pow's special exponents (torch's: multiplication, square roots, reciprocals) and its gradient at
// p = 0 on the GPU as on the CPU, for the values where powf differs: -inf and -0 under p = +-0.5,
// 0 and NaN under p = 0's gradient (0, not 0 * inf or NaN).
TEST(GpuOps, pow_special_exponents_and_values_as_the_cpu) {
  LOCKSTEP_REQUIRE_GPU();
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<float> values{static_cast<float>(-inf), -0.0f, 0.0f, 2.5f, -3.0f,
                                  static_cast<float>(nan)};
  for (DType t : {DType::f32, DType::f64, DType::bf16}) {
    const Tensor x = Tensor::fromVector<float>(values, {6}).to(t);
    const Tensor g = Tensor::fromVector<float>({1, 1, 1, 1, static_cast<float>(inf), 1}, {6}).to(t);
    // Exponents whose value (and, for the gradient, p - 1's) each side computes exactly the same
    // way: the special ones, 0 and 1 (pow(x, 0) and pow(x, 1) are exact in any libm).
    for (double p : {0.0, 0.5, -0.5, 2.0, 3.0, -1.0, -2.0}) {
      SCOPED_TRACE(std::string(dtypeName(t)) + " p " + std::to_string(p));
      const auto same = [](const Tensor& a, const Tensor& b) {
        const std::vector<double> u = a.to(DType::f64).toVector<double>(),
                                  v = b.to(DType::f64).toVector<double>();
        for (size_t i = 0; i < u.size(); ++i) {
          if (std::isnan(u[i]) || std::isnan(v[i])) {
            EXPECT_TRUE(std::isnan(u[i]) && std::isnan(v[i])) << i << ": " << u[i] << " vs " << v[i];
          } else {
            EXPECT_EQ(u[i], v[i]) << i;
            EXPECT_EQ(std::signbit(u[i]), std::signbit(v[i])) << i;
          }
        }
      };
      using kernels::UnaryOp;
      same(kernels::unary(UnaryOp::pow, gpu(x), p).to(Device::cpu()), kernels::unary(UnaryOp::pow, x, p));
      if (p != -0.5 && p != -2.0) {  // p - 1 = -1.5 or -3: powf's last bit is the library's
        same(kernels::unaryBackward(UnaryOp::pow, gpu(g), gpu(x), p).to(Device::cpu()),
             kernels::unaryBackward(UnaryOp::pow, g, x, p));
      }
    }
  }
}
