// The CUDA kernels as one table, after ggml's test-backend-ops: each case names an op, the operand
// sets it runs on (shapes, layouts, a dim, every floating dtype) and what the GPU result is held to:
// the CPU kernel on the same operands, or, for transcendental math (exp, log, pow, erf, tanh,
// softmax), the f64 oracle rounded once; with which tolerance; and the layout the result must
// take. One runner and one tolerance function (gpu_compare.h's tolFor) check every case. Cases
// here: binary, unary, activations, softmax, concat. Runs with ctest -L gpu; skips without a GPU.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "gpu_compare.h"
#include "lockstep/kernels.h"

using namespace lockstep;
using lockstep::testing::f64;
using lockstep::testing::gpu;
using lockstep::testing::gpuMatches;
using lockstep::testing::hostRandom;
using lockstep::testing::kFloatDTypes;
using lockstep::testing::oracle;

namespace {

using Operands = std::vector<Tensor>;
using lockstep::testing::Tol;

/// One operand set: the tensors and, for ops along a dim (softmax, concat), the dim.
struct Inputs {
  Operands x;
  int64_t dim = 0;
};
enum class Against { cpu, oracle };
enum class Layout {
  any,         // values only
  cpu,         // the CPU kernel's strides
  cpu_input,   // the CPU kernel's strides, which are the (dense) input's
  contiguous,  // a contiguous result
};

struct OpCase {
  std::string name;
  std::function<Operands(const Inputs&)> run;        // operands -> results, on their device
  std::function<std::vector<Inputs>(DType)> inputs;  // the host operand sets for one dtype
  Against against = Against::cpu;
  Layout layout = Layout::any;
  std::function<Tol(DType)> tol = [](DType t) { return lockstep::testing::tolFor(t); };
};

Inputs onDevice(const Inputs& in) {
  Inputs g{{}, in.dim};
  for (const Tensor& x : in.x) g.x.push_back(gpu(x));
  return g;
}
Inputs widened(const Inputs& in) {
  Inputs w{{}, in.dim};
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

std::vector<OpCase> opCases() {
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
                   concatInputs, Against::cpu, Layout::contiguous,
                   [](DType) { return lockstep::testing::kExact; }});
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
        for (Tensor& w : want) w = oracle(w, t);
      }
      ASSERT_EQ(got.size(), want.size()) << what;
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_TRUE(gpuMatches(got[i], want[i], c.tol(t), what));
        if (c.layout == Layout::contiguous) {
          EXPECT_TRUE(got[i].isContiguous()) << what;
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
