// autograd::conv2dMaxPool2d: the fused, batch-chunked conv -> max-pool (-> relu) against the three ops.
#include "common/check.h"
#include "lockstep/kernels.h"

using namespace lockstep;
using namespace lockstep::autograd;
using lockstep::testing::gradientsMatch;
using lockstep::testing::randomTensor;
using lockstep::testing::tensorsNear;

namespace {
struct Threads {
  int prev = kernels::numThreads();
  explicit Threads(int n) { kernels::setNumThreads(n); }
  ~Threads() { kernels::setNumThreads(prev); }
};

struct Result {
  Tensor y, gx, gw, gb;
};

// Runs fused or composed on copies of the inputs, backpropagates sum(y * r) and returns y and grads.
Result run(bool fused, const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dOptions& co,
           const Pool2dOptions& po, bool relu, bool x_grad) {
  Variable xv(x.clone(), x_grad), wv(w.clone(), true), bv(b.clone(), true);
  Variable y = fused ? conv2dMaxPool2d(xv, wv, bv, co, po, relu) : maxPool2d(conv2d(xv, wv, bv, co), po);
  if (!fused && relu) y = autograd::relu(y);
  Tensor r = randomTensor(y.shape(), y.dtype(), 42);
  sum(mul(y, Variable(r))).backward();
  return {y.tensor(), x_grad ? xv.grad() : Tensor(), wv.grad(), bv.grad()};
}
}  // namespace

TEST(Conv2dMaxPool2d, gradient) {
  // f64 runs the reference kernels (no pooling workspace: the chunk's convolution output is kept).
  for (bool relu : {false, true}) {
    Conv2dOptions co;
    co.padding = {1, 0};
    Pool2dOptions po;
    po.kernel = {2, 3};
    po.stride = {2, 2};
    EXPECT_TRUE(gradientsMatch(
        [&](const std::vector<Variable>& in) { return conv2dMaxPool2d(in[0], in[1], in[2], co, po, relu); },
        {randomTensor({2, 2, 6, 7}, DType::f64, 1), randomTensor({3, 2, 3, 3}, DType::f64, 2),
         randomTensor({3}, DType::f64, 3)}))
        << "relu " << relu;
  }
}

TEST(Conv2dMaxPool2d, chunked_equals_conv_then_pool_then_relu) {
  // 64 channels of 64x64 floats = 1 MiB of convolution output per sample: one sample per chunk on
  // one thread, so a batch of 3 runs as 3 chunks; on 2 threads as 2 chunks (2 + 1).
  Tensor x = randomTensor({3, 3, 66, 66}, DType::f32, 4).toFormat(MemoryFormat::channels_last);
  Tensor w = randomTensor({64, 3, 3, 3}, DType::f32, 5, -0.3, 0.3), b = randomTensor({64}, DType::f32, 6);
  for (int threads : {1, 2}) {
    Threads t(threads);
    for (bool relu : {false, true}) {
      for (bool x_grad : {false, true}) {
        Result f = run(true, x, w, b, {}, {}, relu, x_grad), c = run(false, x, w, b, {}, {}, relu, x_grad);
        const std::string what = "threads " + std::to_string(threads) + " relu " + std::to_string(relu) +
                                 " x_grad " + std::to_string(x_grad);
        EXPECT_EQ(f.y.toVector<float>(), c.y.toVector<float>()) << what;
        EXPECT_TRUE(f.y.isChannelsLast()) << what;
        EXPECT_TRUE(tensorsNear(f.gw, c.gw, 1e-4, 1e-5)) << what;
        EXPECT_TRUE(tensorsNear(f.gb, c.gb, 1e-4, 1e-5)) << what;
        if (x_grad) {
          EXPECT_EQ(f.gx.toVector<float>(), c.gx.toVector<float>()) << what;
        } else {
          EXPECT_FALSE(f.gx.defined());
        }
      }
    }
  }
}

TEST(Conv2dMaxPool2d, keeps_no_convolution_output) {
  // What the graph holds after forward: input, weights, pooled output (relu's mask) and the pooling
  // workspace, but not the 1 MiB-per-sample convolution output.
  Threads t(1);
  Tensor x = randomTensor({3, 3, 66, 66}, DType::f32, 4).toFormat(MemoryFormat::channels_last);
  Variable w(randomTensor({64, 3, 3, 3}, DType::f32, 5), true), b(randomTensor({64}, DType::f32, 6), true);
  const size_t before = CachingAllocator::instance().stats().bytes_in_use;
  Variable y = conv2dMaxPool2d(Variable(x), w, b, {}, {}, true);
  const size_t held = CachingAllocator::instance().stats().bytes_in_use - before;
  EXPECT_LT(held, size_t{3} << 20) << "bytes held after forward: "
                                   << held;  // 3 samples x 1 MiB would be 3 MiB
  sum(y).backward();
  EXPECT_TRUE(w.hasGrad());
}

TEST(Conv2dMaxPool2d, empty_batch_and_bad_options) {
  Variable w(Tensor::zeros({4, 2, 3, 3}), true);
  Variable y = conv2dMaxPool2d(Variable(Tensor::zeros({0, 2, 8, 8})), w, Variable(), {}, {}, true);
  EXPECT_EQ(y.shape(), (Shape{0, 4, 3, 3}));
  Conv2dOptions fused;
  fused.fuse_relu = true;
  EXPECT_THROW(conv2dMaxPool2d(Variable(Tensor::zeros({1, 2, 8, 8})), w, Variable(), fused, {}, true),
               ValueError);
  EXPECT_THROW(conv2dMaxPool2d(Variable(Tensor::zeros({1, 3, 8, 8})), w, Variable(), {}, {}, true),
               ValueError);
}
