#include <gtest/gtest.h>

#include "common/check.h"
#include "lockstep/kernels.h"

using namespace lockstep;
using namespace lockstep::autograd;
using lockstep::testing::randomTensor;

TEST(Relu, gradient) {
  // Keep inputs away from the kink at 0, where the finite difference is not the derivative.
  Tensor x = randomTensor({3, 4, 5}, DType::f64, 5);
  auto v = x.toVector<double>();
  for (auto& e : v) e = e >= 0 ? e + 0.1 : e - 0.1;
  EXPECT_TRUE(lockstep::testing::gradientsMatch([](const std::vector<Variable>& in) { return relu(in[0]); },
                                                {Tensor::fromVector<double>(v, {3, 4, 5})}));
}

TEST(Autograd, gradients_accumulate_across_backward_calls) {
  Variable x(Tensor::fromVector<double>({1.0, -2.0, 3.0}, {3}), true);
  for (int i = 0; i < 3; ++i) relu(x).backward(Tensor::ones({3}, DType::f64));
  EXPECT_EQ(x.grad().toVector<double>(), (std::vector<double>{3.0, 0.0, 3.0}));
  x.zeroGrad();
  EXPECT_FALSE(x.hasGrad());
}

TEST(Autograd, gradients_accumulate_over_two_uses_in_one_graph) {
  Variable x(Tensor::fromVector<double>({1.0, 2.0}, {2}), true);
  Variable y = relu(relu(x));
  Variable z = relu(x);
  // Route both through one output: y and z are both used by a node with two inputs.
  struct SumBackward : Node {
    std::vector<Tensor> apply(const Tensor& g) override { return {g, g}; }
    std::string name() const override { return "TestSum"; }
  };
  Tensor out = y.tensor().clone();
  kernels::addInto(out, z.tensor());
  Variable s = record<SumBackward>(out, {&y, &z});
  s.backward(Tensor::ones({2}, DType::f64));
  EXPECT_EQ(x.grad().toVector<double>(), (std::vector<double>{2.0, 2.0}));
}

TEST(Autograd, hooks_fire_once_per_leaf_during_backward) {
  Variable a(Tensor::fromVector<double>({1.0}, {1}), true);
  Variable b(Tensor::fromVector<double>({2.0}, {1}), true);
  std::vector<std::string> events;
  a.registerGradReadyHook([&](Variable& v) {
    EXPECT_TRUE(v.hasGrad());
    events.push_back("a");
  });
  b.registerGradReadyHook([&](Variable&) { events.push_back("b"); });
  // b is used twice; a once, deeper in the graph. b's hook must fire exactly once.
  struct Pair : Node {
    std::vector<std::string>* ev;
    explicit Pair(std::vector<std::string>* e) : ev(e) {}
    std::vector<Tensor> apply(const Tensor& g) override {
      ev->push_back("node");
      return {g, g};
    }
    std::string name() const override { return "TestPair"; }
  };
  Variable ra = relu(a);
  Variable p1 = record<Pair>(ra.tensor().clone(), {&ra, &b}, &events);
  Variable p2 = record<Pair>(p1.tensor().clone(), {&p1, &b}, &events);
  p2.backward(Tensor::ones({1}, DType::f64));
  ASSERT_EQ(std::count(events.begin(), events.end(), "a"), 1);
  ASSERT_EQ(std::count(events.begin(), events.end(), "b"), 1);
  // b is complete after both Pair nodes ran, a after relu: b's hook fires before a's, and both
  // fire before backward() returns (we are past it now, and events already holds them).
  EXPECT_EQ(events, (std::vector<std::string>{"node", "node", "b", "a"}));
  events.clear();
  relu(a).backward(Tensor::ones({1}, DType::f64));
  EXPECT_EQ(events, (std::vector<std::string>{"a"}));
}

TEST(Autograd, no_grad_guard_records_nothing) {
  Variable x(Tensor::fromVector<double>({1.0}, {1}), true);
  {
    NoGradGuard ng;
    Variable y = relu(x);
    EXPECT_FALSE(y.requiresGrad());
    EXPECT_EQ(y.gradFn(), nullptr);
  }
  EXPECT_TRUE(relu(x).requiresGrad());
}

TEST(Autograd, second_backward_through_freed_graph_is_an_error) {
  Variable x(Tensor::fromVector<double>({1.0}, {1}), true);
  Variable y = relu(relu(x));
  y.backward();
  try {
    y.backward();
    FAIL() << "expected an error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("second time"), std::string::npos) << e.what();
  }
  Variable z = relu(relu(x));
  z.backward(Tensor(), /*retain_graph=*/true);
  EXPECT_NO_THROW(z.backward());
}

TEST(Autograd, backward_needs_scalar_or_gradient) {
  Variable x(Tensor::fromVector<double>({1.0, 2.0}, {2}), true);
  EXPECT_THROW(relu(x).backward(), ValueError);
  Variable c(Tensor::fromVector<double>({1.0}, {1}));
  EXPECT_THROW(relu(c).backward(), ValueError);
}

namespace {
// y = 3x, whose backward adds 3g into the gradient the engine already holds for x when it is
// offered one (Node::applyInto), and says whether it was.
struct TripleBackward : Node {
  explicit TripleBackward(std::vector<bool>* offered) : offered_(offered) {}
  bool accumulates() const override { return true; }
  std::vector<Tensor> apply(const Tensor& g) override {
    return {kernels::binaryScalar(kernels::BinaryOp::mul, g, 3)};
  }
  std::vector<Tensor> applyInto(const Tensor& g, const std::vector<Tensor*>& into) override {
    offered_->push_back(held(into, 0) != nullptr);
    if (Tensor* h = held(into, 0)) {
      kernels::addInto(*h, g, 3.0);
      return {Tensor()};
    }
    return apply(g);
  }
  std::string name() const override { return "TestTriple"; }
  std::vector<bool>* offered_;
};

Variable triple(const Variable& x, std::vector<bool>* offered) {
  return record<TripleBackward>(kernels::binaryScalar(kernels::BinaryOp::mul, x.tensor(), 3), {&x}, offered);
}
}  // namespace

// A reader whose backward runs after another reader of the same tensor adds its gradient into the
// held one (the later-created node runs first, so the triple, created first, runs last).
TEST(Autograd, a_later_reader_adds_into_the_held_gradient) {
  std::vector<bool> offered;
  Variable x(Tensor::fromVector<double>({1.0, -2.0, 3.0}, {3}), true);
  Variable t = triple(x, &offered);
  Variable r = relu(x);
  (t + r).backward(Tensor::ones({3}, DType::f64));
  EXPECT_EQ(offered, std::vector<bool>{true});
  EXPECT_EQ(x.grad().toVector<double>(), (std::vector<double>{4.0, 3.0, 4.0}));
}

// Never into a buffer something else holds: here the held gradient is the very tensor the triple
// receives (the sum's backward and x + 1's pass one tensor on), so adding into it would change the
// triple's own input as it reads it.
TEST(Autograd, a_shared_gradient_is_not_offered_to_add_into) {
  std::vector<bool> offered;
  Variable x(Tensor::fromVector<double>({1.0, -2.0, 3.0}, {3}), true);
  Variable t = triple(x, &offered);
  Variable s = x + 1.0;
  (t + s).backward(Tensor::ones({3}, DType::f64));
  EXPECT_EQ(offered, std::vector<bool>{false});
  EXPECT_EQ(x.grad().toVector<double>(), (std::vector<double>{4.0, 4.0, 4.0}));
  // The first reader to run finds nothing held.
  std::vector<bool> first;
  Variable y(Tensor::fromVector<double>({1.0, 2.0}, {2}), true);
  Variable r = relu(y);
  Variable u = triple(y, &first);
  (u + r).backward(Tensor::ones({2}, DType::f64));
  EXPECT_EQ(first, std::vector<bool>{false});
  EXPECT_EQ(y.grad().toVector<double>(), (std::vector<double>{4.0, 4.0}));
}

// A 16-bit cast of an f32 tensor for each of its readers (autocast's rule for a tensor with several
// lower-precision readers): the casts' gradients add into the f32 one as they are read, giving what
// widening each and adding gives.
TEST(Autograd, narrow_reads_of_a_wide_tensor_add_their_gradients_as_widened) {
  Variable x(randomTensor({4, 33}, DType::f32, 3), true);
  Tensor w1 = randomTensor({4, 33}, DType::bf16, 4), w2 = randomTensor({4, 33}, DType::bf16, 5);
  Tensor w3 = randomTensor({4, 33}, DType::f32, 6);
  Variable a = toDType(x, DType::bf16), b = toDType(x, DType::bf16);
  Variable loss = sum(toDType(a * Variable(w1), DType::f32)) + sum(toDType(b * Variable(w2), DType::f32)) +
                  sum(x * Variable(w3));
  loss.backward();
  // Each cast's gradient is its weight (bf16), widened exactly; the engine adds in node order: the
  // last-created reader first (x * w3), then b's cast, then a's.
  Tensor want = w3.clone();
  kernels::addInto(want, w2.to(DType::f32));
  kernels::addInto(want, w1.to(DType::f32));
  ASSERT_EQ(x.grad().dtype(), DType::f32);
  EXPECT_TRUE(lockstep::testing::tensorsNear(x.grad(), want, 0, 0));
}

// The pieces of a split read by different ops (GPT's q, k and v): the later pieces' backward adds
// into its own slice of the gradient the first piece's wrote, bitwise the engine's whole adds, in
// f64, f32 and bf16, split along the last and a middle dimension, with pieces left unread.
TEST(Autograd, split_pieces_add_their_gradients_into_their_slices) {
  for (DType dt : {DType::f64, DType::f32, DType::bf16}) {
    for (int64_t dim : {2, 1}) {
      SCOPED_TRACE(std::string(dtypeName(dt)) + " dim " + std::to_string(dim));
      const Tensor x0 = randomTensor({3, 12, 18}, dt, 7);
      const int64_t piece = x0.size(dim) / 3;
      std::vector<Tensor> w;
      for (int i = 0; i < 3; ++i) {
        Shape s = x0.shape();
        s[dim] = piece;
        w.push_back(randomTensor(s, dt, 20 + i));
      }
      // loss = sum(f_i(piece_i) * w_i), f = relu, tanh, identity; piece 1 unread when `skip`.
      auto run = [&](bool skip) {
        Variable x(x0.clone(), true);
        std::vector<Variable> p = split(x, piece, dim);
        Variable loss = sum(toDType(relu(p[0]) * Variable(w[0]), DType::f64));
        if (!skip) loss = loss + sum(toDType(tanh(p[1]) * Variable(w[1]), DType::f64));
        loss = loss + sum(toDType(p[2] * Variable(w[2]), DType::f64));
        loss.backward();
        return x.grad();
      };
      for (bool skip : {false, true}) {
        // The expected gradient: each piece's own gradient placed in zeros, added in the engine's
        // order (the last-created reader's first), as whole tensors.
        std::vector<Variable> p = split(Variable(x0), piece, dim);
        std::vector<Tensor> g(3);
        for (int i = 0; i < 3; ++i) {
          Variable v(p[i].tensor().clone(), true);
          Variable f = i == 0 ? relu(v) : i == 1 ? tanh(v) : v;
          if (i == 1 && skip) continue;
          sum(toDType(f * Variable(w[i]), DType::f64)).backward();
          g[i] = Tensor::zeros(x0.shape(), dt);
          g[i].narrow(dim, i * piece, piece).copyFrom(v.grad());
        }
        Tensor want = g[2].clone();
        if (!skip) kernels::addInto(want, g[1]);
        kernels::addInto(want, g[0]);
        const Tensor got = run(skip);
        ASSERT_EQ(got.dtype(), dt);
        EXPECT_TRUE(lockstep::testing::tensorsNear(got, want, 0, 0)) << "skip " << skip;
      }
    }
  }
}
