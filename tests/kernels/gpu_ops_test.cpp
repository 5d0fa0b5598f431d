// The CUDA kernels as one table, after ggml's test-backend-ops: each case names an op, the operand
// sets it runs on (shapes, layouts, a dim, every floating dtype) and what the GPU result is held to:
// the CPU kernel on the same operands, or, for transcendental math (exp, log, pow, erf, tanh,
// softmax), the f64 oracle rounded once; with which tolerance; and the layout the result must
// take. One runner and one tolerance function (gpu_compare.h's tolFor) check every case. Cases
// here: binary, unary, activations, softmax, concat, sum/mean, the losses, pooling and dropout; the
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
  keeps_channels_last,  // channels-last when the first operand is
};

struct OpCase {
  std::string name;
  std::function<Operands(const Inputs&)> run;        // operands -> results, on their device
  std::function<std::vector<Inputs>(DType)> inputs;  // the host operand sets for one dtype
  Against against = Against::cpu;
  Layout layout = Layout::any;
  /// The tolerance for a result of this dtype from these operands.
  std::function<Tol(DType, const Inputs&)> tol = [](DType t, const Inputs&) {
    return lockstep::testing::tolFor(t);
  };
};

Tol exact(DType, const Inputs&) { return lockstep::testing::kExact; }

Inputs onDevice(const Inputs& in) {
  Inputs g{{}, in.dim, in.dims};
  for (const Tensor& x : in.x) g.x.push_back(gpu(x));
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
Tol sumTol(DType t, const Inputs& in) {
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
Tol lossTol(DType t, const Inputs&) {
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
  return v;
}

std::vector<OpCase> lossCases() {
  std::vector<OpCase> cases;
  for (LossReduction r : kReductions) {
    for (double smoothing : {0.0, 0.1}) {
      kernels::CrossEntropyParams p;
      p.reduction = r;
      p.label_smoothing = smoothing;
      const std::string name =
          "cross_entropy " + reductionName(r) + " smoothing " + std::to_string(smoothing);
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
                     [r](DType t, const Inputs& in) {
                       Tol tol = lossTol(t, in);
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
  auto poolTol = [](DType t, const Inputs&) { return lockstep::testing::tolFor(t, OpClass::pool); };
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

std::vector<OpCase> opCases() {
  std::vector<OpCase> cases;
  for (auto group : {elementwiseCases, reduceCases, lossCases, poolCases, dropoutCases}) {
    for (OpCase& c : group()) cases.push_back(std::move(c));
  }
  return cases;
}

void runCase(const OpCase& c) {
  for (DType t : kFloatDTypes) {
    for (const Inputs& in : c.inputs(t)) {
      std::string what = c.name + " " + dtypeName(t) + " dim " + std::to_string(in.dim);
      for (const Tensor& x : in.x) what += " " + x.describe();
      const Operands got = c.run(onDevice(in));
      const Operands cpu = c.run(in);
      Operands want = cpu;
      if (c.against == Against::oracle) {
        want = c.run(widened(in));
        for (size_t i = 0; i < want.size() && i < cpu.size(); ++i) want[i] = oracle(want[i], cpu[i].dtype());
      }
      ASSERT_EQ(got.size(), want.size()) << what;
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_TRUE(gpuMatches(got[i], want[i], c.tol(want[i].dtype(), in), what));
        if (c.layout == Layout::contiguous) {
          EXPECT_TRUE(got[i].isContiguous()) << what;
          continue;
        }
        if (c.layout == Layout::keeps_channels_last) {
          if (in.x[0].isChannelsLast()) {
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
