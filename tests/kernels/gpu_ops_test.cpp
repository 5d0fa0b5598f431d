// The element-wise CUDA kernels as one table, after ggml's test-backend-ops: each case names an op,
// the operand sets it runs on (shapes, layouts, every floating dtype) and what the GPU result is
// held to: the CPU kernel on the same operands, or, for transcendental math (exp, log, pow, erf,
// tanh), the f64 oracle rounded once; and whether the result must take the CPU kernel's layout.
// One runner and one tolerance function (gpu_compare.h's tolFor) check every case. Runs with
// ctest -L gpu; skips without a GPU.
#include <gtest/gtest.h>

#include <functional>
#include <string>
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

enum class Against { cpu, oracle };
enum class Layout {
  any,       // values only
  cpu,       // the CPU kernel's strides
  cpu_input  // the CPU kernel's strides, which are the (dense) input's
};

struct OpCase {
  std::string name;
  std::function<Operands(const Operands&)> run;        // operands -> results, on their device
  std::function<std::vector<Operands>(DType)> inputs;  // the host operand sets for one dtype
  Against against = Against::cpu;
  Layout layout = Layout::any;
};

Operands onDevice(const Operands& xs) {
  Operands g;
  for (const Tensor& x : xs) g.push_back(gpu(x));
  return g;
}
Operands widened(const Operands& xs) {
  Operands w;
  for (const Tensor& x : xs) w.push_back(f64(x));
  return w;
}

// Operand pairs: same shape, broadcast both ways, a scalar, a transposed view, an empty tensor.
std::vector<Operands> binaryOperands(DType t, bool swapped) {
  std::vector<Operands> v;
  auto add = [&](Tensor a, Tensor b) { v.push_back(swapped ? Operands{b, a} : Operands{a, b}); };
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
std::function<std::vector<Operands>(DType)> maps(double low, double high) {
  return [=](DType t) {
    std::vector<Operands> v;
    for (const Tensor& x : mapInputs(t, low, high)) v.push_back({x});
    return v;
  };
}

// {gy, saved} for each map input: saved is the input x, or the forward's output rounded from the
// f64 oracle (the same numbers on both sides).
std::function<std::vector<Operands>(DType)> backwardMaps(double low, double high,
                                                         std::function<Tensor(const Tensor&)> output) {
  return [=](DType t) {
    std::vector<Operands> v;
    for (const Tensor& x : mapInputs(t, low, high)) {
      v.push_back({hostRandom(x.shape(), t, 9), output ? oracle(output(f64(x)), t) : x});
    }
    return v;
  };
}

std::vector<OpCase> elementwiseCases() {
  std::vector<OpCase> cases;
  using kernels::BinaryOp;
  for (BinaryOp op : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div}) {
    const std::string name = kernels::binaryOpName(op);
    auto run = [op](const Operands& x) { return Operands{kernels::binary(op, x[0], x[1])}; };
    cases.push_back({name, run, [](DType t) { return binaryOperands(t, false); }});
    cases.push_back({name + " swapped", run, [](DType t) { return binaryOperands(t, true); }});
    cases.push_back({name + " scalar",
                     [op](const Operands& x) { return Operands{kernels::binaryScalar(op, x[0], 1.75)}; },
                     [](DType t) { return binaryOperands(t, false); }});
  }
  using kernels::UnaryOp;
  for (UnaryOp op : {UnaryOp::neg, UnaryOp::exp, UnaryOp::log, UnaryOp::sqrt, UnaryOp::pow}) {
    const std::string name = kernels::unaryOpName(op);
    // Values against the f64 oracle (oneDNN's f32 log on the CPU is off by up to 3.5e-6); the
    // layout against the CPU kernel's.
    cases.push_back({name, [op](const Operands& x) { return Operands{kernels::unary(op, x[0], 2.5)}; },
                     maps(0.25, 3.0), Against::oracle, Layout::cpu});
    std::function<Tensor(const Tensor&)> output;
    if (kernels::unaryBackwardUsesOutput(op))
      output = [op](const Tensor& x) { return kernels::unary(op, x, 2.5); };
    cases.push_back(
        {name + " backward",
         [op](const Operands& x) { return Operands{kernels::unaryBackward(op, x[0], x[1], 2.5)}; },
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
    cases.push_back({a.name, [fwd](const Operands& x) { return Operands{fwd(x[0])}; }, maps(-4.0, 4.0),
                     Against::oracle, Layout::cpu_input});
    std::function<Tensor(const Tensor&)> output;
    if (a.from_output) output = fwd;
    cases.push_back({std::string(a.name) + " backward",
                     [bwd](const Operands& x) { return Operands{bwd(x[0], x[1])}; },
                     backwardMaps(-4.0, 4.0, output), Against::oracle, Layout::cpu});
  }
  for (double slope : {0.01, 0.2}) {
    const std::string name = "leaky_relu " + std::to_string(slope);
    cases.push_back({name,
                     [slope](const Operands& x) { return Operands{kernels::leakyReluForward(x[0], slope)}; },
                     maps(-4.0, 4.0)});
    cases.push_back(
        {name + " backward",
         [slope](const Operands& x) { return Operands{kernels::leakyReluBackward(x[0], x[1], slope)}; },
         backwardMaps(-4.0, 4.0, nullptr)});
  }
  return cases;
}

void runCase(const OpCase& c) {
  for (DType t : kFloatDTypes) {
    for (const Operands& xs : c.inputs(t)) {
      std::string what = c.name + " " + dtypeName(t);
      for (const Tensor& x : xs) what += " " + x.describe();
      const Operands got = c.run(onDevice(xs));
      const Operands cpu = c.run(xs);
      Operands want = cpu;
      if (c.against == Against::oracle) {
        want = c.run(widened(xs));
        for (Tensor& w : want) w = oracle(w, t);
      }
      ASSERT_EQ(got.size(), want.size()) << what;
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_TRUE(gpuMatches(got[i], want[i], what));
        if (c.layout != Layout::any) {
          EXPECT_EQ(got[i].strides(), cpu[i].strides()) << what;
        }
        if (c.layout == Layout::cpu_input) {
          EXPECT_EQ(got[i].strides(), xs[0].strides()) << what;
        }
      }
    }
  }
}

}  // namespace

TEST(GpuOps, elementwise_ops_match_the_cpu_or_the_f64_oracle) {
  LOCKSTEP_REQUIRE_GPU();
  for (const OpCase& c : elementwiseCases()) {
    SCOPED_TRACE(c.name);
    runCase(c);
  }
}
