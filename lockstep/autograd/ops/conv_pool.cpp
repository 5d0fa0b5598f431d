// conv2d -> max-pool (-> relu) as one op that walks the batch in chunks. The convolution's output is
// the largest activation of a small CNN (32x32x26x26 floats = 2.8 MB for the seed CNN at batch 32)
// and lives only between two kernels: here it exists one chunk at a time, in a buffer small enough
// to stay in the core's cache, and is never kept for backward (the pooling workspace says where
// each maximum came from). Backward walks the same chunks: pooling's backward rebuilds one chunk of
// the convolution's output gradient, which feeds the convolution's backward at once. Fewer bytes
// through the shared cache per step is what lets ranks on neighbouring cores not slow each other.
#include "lockstep/autograd/ops/conv_pool.h"

#include <algorithm>

#include "lockstep/autograd/autocast.h"
#include "lockstep/autograd/function.h"
#include "lockstep/autograd/ops/activation.h"
#include "lockstep/autograd/ops/kernel_params.h"
#include "lockstep/kernels/accumulate.h"
#include "lockstep/kernels/activation.h"
#include "lockstep/kernels/conv.h"
#include "lockstep/kernels/layout.h"
#include "lockstep/kernels/pool.h"
#include "lockstep/kernels/threads.h"

namespace lockstep::autograd {

namespace {

// Samples per chunk: as many as keep one chunk of the convolution's output within ~1 MiB per
// thread, at least one. Measured on the dev VM (1 MiB of L2 per core), seed CNN, batch 32: budgets
// of 1 MiB, 512 and 256 KiB gave the same step time; 128 and 64 KiB were 15-30% slower (smaller
// convolutions).
int64_t chunkSamples(const Shape& conv_out, DType dtype) {
  const int64_t per_sample = conv_out[1] * conv_out[2] * conv_out[3] * static_cast<int64_t>(dtypeSize(dtype));
  const int64_t budget = int64_t{1} << 20;
  return std::clamp<int64_t>(budget * kernels::numThreads() / std::max<int64_t>(per_sample, 1), 1,
                             conv_out[0]);
}

class Conv2dMaxPool2dBackward final : public Node {
 public:
  struct Chunk {
    int64_t start, size;
    Tensor workspace;  // the pooling workspace of this chunk (oneDNN)
    Tensor conv_out;   // kept only when the pooling kernel has no workspace (reference kernels)
    Shape conv_shape, conv_strides;
  };
  Conv2dMaxPool2dBackward(Tensor x, Tensor w, bool with_bias, kernels::Conv2dParams cp,
                          kernels::Pool2dParams pp, Tensor y, std::vector<Chunk> chunks)
      : x_(std::move(x)),
        w_(std::move(w)),
        with_bias_(with_bias),
        cp_(cp),
        pp_(pp),
        y_(std::move(y)),
        chunks_(std::move(chunks)) {}

  std::vector<Tensor> apply(const Tensor& gy_in) override {
    std::vector<Tensor> grads(3);
    const bool want_x = edges_[0] != nullptr, want_w = edges_[1] != nullptr, want_b = with_bias_ && edges_[2];
    if (want_x && chunks_.size() > 1)
      grads[0] = Tensor::empty(x_.shape(), x_.dtype(), MemoryFormat::channels_last);
    for (const Chunk& c : chunks_) {
      Tensor gy = gy_in.narrow(0, c.start, c.size);
      if (y_.defined()) gy = kernels::reluBackward(gy, y_.narrow(0, c.start, c.size));
      const Tensor conv_out =
          c.conv_out.defined() ? c.conv_out : Tensor::emptyStrided(c.conv_shape, c.conv_strides, x_.dtype());
      Tensor g = kernels::maxPool2dBackward(gy, conv_out, c.workspace, pp_);
      const Tensor xc = x_.narrow(0, c.start, c.size);
      if (want_x) {
        Tensor gx = kernels::conv2dBackwardData(g, xc, w_, cp_);
        if (chunks_.size() == 1) {
          grads[0] = std::move(gx);
        } else {
          grads[0].narrow(0, c.start, c.size).copyFrom(gx);
        }
      }
      if (want_w || want_b) {
        auto wg = kernels::conv2dBackwardWeights(g, xc, w_.shape(), want_b, cp_);
        if (c.start == 0) {
          grads[1] = std::move(wg.weight);
          grads[2] = std::move(wg.bias);
        } else {
          kernels::addInto(grads[1], wg.weight);
          if (want_b) kernels::addInto(grads[2], wg.bias);
        }
      }
    }
    if (!want_w) grads[1] = Tensor();
    if (!want_b) grads[2] = Tensor();
    return grads;
  }
  std::string name() const override { return "Conv2dMaxPool2dBackward"; }
  void releaseSaved() override {
    x_ = Tensor();
    w_ = Tensor();
    y_ = Tensor();
    chunks_.clear();
  }

 private:
  Tensor x_, w_;
  bool with_bias_;
  kernels::Conv2dParams cp_;
  kernels::Pool2dParams pp_;
  Tensor y_;  // the output, kept with relu for its mask
  std::vector<Chunk> chunks_;
};

}  // namespace

Variable conv2dMaxPool2d(const Variable& x0, const Variable& weight0, const Variable& bias0,
                         const Conv2dOptions& conv, const Pool2dOptions& pool, bool relu) {
  const Variable x = autocast::lower(x0), weight = autocast::lower(weight0), bias = autocast::lower(bias0);
  LOCKSTEP_ENFORCE(
      !conv.fuse_relu, ValueError,
      "conv2dMaxPool2d: set relu=true instead of Conv2dOptions.fuse_relu (the relu is applied after "
      "the pooling)");
  const kernels::Conv2dParams cp = convParams(conv);  // fuse_relu is false (checked above)
  const kernels::Pool2dParams pp = poolParams(pool);
  Tensor b = bias.defined() ? bias.tensor() : Tensor();
  kernels::checkConv2d(x.tensor(), weight.tensor(), b, cp);
  // Nothing to walk, or on a GPU (whose whole-batch kernels have no cache to keep chunks in): the
  // plain ops, which also give the empty result and its shape checks.
  if (x.size(0) == 0 || x.tensor().isCuda()) {
    Variable y = maxPool2d(conv2d(x, weight, bias, conv), pool);
    return relu ? autograd::relu(y) : y;
  }
  const bool training = needsGrad({&x, &weight, &bias});
  Tensor xin = kernels::conv2dInput(x.tensor());
  const Shape conv_shape = kernels::conv2dOutputShape(xin.shape(), weight.shape(), cp);
  const Shape pool_shape = kernels::pool2dOutputShape(conv_shape, pp, "max_pool2d");
  Tensor y;
  std::vector<Conv2dMaxPool2dBackward::Chunk> chunks;
  const int64_t n = xin.size(0), step = chunkSamples(conv_shape, xin.dtype());
  for (int64_t start = 0; start < n; start += step) {
    const int64_t size = std::min(step, n - start);
    Tensor c = kernels::conv2dForward(xin.narrow(0, start, size), weight.tensor(), b, cp);
    auto r = kernels::maxPool2dForward(c, pp, training);
    if (size == n) {  // one chunk: the pooled output is the result
      y = relu ? kernels::reluForward(r.y) : r.y;
    } else if (!y.defined()) {
      y = Tensor::empty(pool_shape, r.y.dtype(), kernels::formatOf(r.y));
    }
    if (size < n) {
      Tensor dst = y.narrow(0, start, size);
      dst.copyFrom(relu ? kernels::reluForward(r.y) : r.y);
    }
    if (training) {
      chunks.push_back(
          {start, size, r.workspace, r.workspace.defined() ? Tensor() : c, c.shape(), c.strides()});
    }
  }
  return record<Conv2dMaxPool2dBackward>(y, {&x, &weight, &bias}, xin, weight.tensor(), b.defined(), cp, pp,
                                         relu ? y : Tensor(), std::move(chunks));
}

}  // namespace lockstep::autograd
