#include "lockstep/kernels/activation.h"

#include <dnnl.hpp>

#include "lockstep/kernels/dnnl/context.h"
#include "lockstep/kernels/tables/activation.h"

namespace lockstep::kernels::onednn {

namespace {
using Alg = dnnl::algorithm;

// Element-wise ops run over a dense tensor as a flat 1-d buffer, so the key needs only the count.
std::string key(const Tensor& t, Alg alg, float alpha) {
  return std::to_string(t.numel()) + dtypeName(t.dtype()) + "/" + std::to_string(static_cast<int>(alg)) +
         "/" + std::to_string(alpha);
}

Tensor eltwiseForward(const Tensor& x0, Alg alg, float alpha, const char* op) {
  Tensor x = dense(x0);
  Tensor y = Tensor::emptyLike(x);
  if (x.numel() == 0) return y;
  static PrimitiveCache<dnnl::eltwise_forward> cache;
  auto md = flatDesc(x);
  try {
    auto& prim = cache.get(key(x, alg, alpha), [&] {
      auto d = dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, alg, md, alpha);
      return dnnl::eltwise_forward(dnnl::eltwise_forward::primitive_desc(d, attributes(), engine()));
    });
    execute(prim, {{DNNL_ARG_SRC, memory(md, x)}, {DNNL_ARG_DST, memory(md, y)}});
  } catch (const dnnl::error& e) {
    rethrow(e, op);
  }
  return y;
}

// `saved` is the forward's output for the *_use_dst_for_bwd algorithms, its input otherwise.
Tensor eltwiseBackward(const Tensor& gy0, const Tensor& saved0, Alg alg, float alpha, bool saved_is_dst,
                       const char* op) {
  Tensor saved = dense(saved0);
  // The flat view pairs elements by memory position, so gy must share saved's layout.
  Tensor gy = laidOutLike(gy0, saved);
  Tensor gx = Tensor::emptyLike(saved);
  if (saved.numel() == 0) return gx;
  static PrimitiveCache<dnnl::eltwise_backward> cache;
  auto md = flatDesc(saved);
  try {
    auto& prim = cache.get(key(saved, alg, alpha), [&] {
      auto fd = dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, alg, md, alpha);
      auto fpd = dnnl::eltwise_forward::primitive_desc(fd, attributes(), engine());
      auto bd = dnnl::eltwise_backward::desc(alg, md, md, alpha);
      return dnnl::eltwise_backward(dnnl::eltwise_backward::primitive_desc(bd, attributes(), engine(), fpd));
    });
    execute(prim, {{saved_is_dst ? DNNL_ARG_DST : DNNL_ARG_SRC, memory(md, saved)},
                   {DNNL_ARG_DIFF_DST, memory(md, gy)},
                   {DNNL_ARG_DIFF_SRC, memory(md, gx)}});
  } catch (const dnnl::error& e) {
    rethrow(e, op);
  }
  return gx;
}
}  // namespace

// relu and leaky_relu's gradient are the cpu loops' in every dtype (kernels/cpu/activation.cpp):
// oneDNN's relu, a max against 0, turns a NaN into 0 where torch.relu keeps it, and its leaky_relu
// gradient passes gy at a NaN where torch's takes the slope.

Tensor leakyReluForward(const Tensor& x, double slope) {
  return eltwiseForward(x, Alg::eltwise_relu, static_cast<float>(slope), "leaky_relu forward");
}
// From the input: the output's sign says nothing about the input's when the slope is negative.

Tensor geluForward(const Tensor& x) { return eltwiseForward(x, Alg::eltwise_gelu_erf, 0.f, "gelu forward"); }
Tensor geluBackward(const Tensor& gy, const Tensor& x) {
  return eltwiseBackward(gy, x, Alg::eltwise_gelu_erf, 0.f, false, "gelu backward");
}

Tensor geluTanhForward(const Tensor& x) {
  return eltwiseForward(x, Alg::eltwise_gelu_tanh, 0.f, "gelu(tanh) forward");
}
Tensor geluTanhBackward(const Tensor& gy, const Tensor& x) {
  return eltwiseBackward(gy, x, Alg::eltwise_gelu_tanh, 0.f, false, "gelu(tanh) backward");
}

// oneDNN's swish is x sigmoid(alpha x); alpha = 1 is SiLU.
Tensor siluForward(const Tensor& x) { return eltwiseForward(x, Alg::eltwise_swish, 1.f, "silu forward"); }
Tensor siluBackward(const Tensor& gy, const Tensor& x) {
  return eltwiseBackward(gy, x, Alg::eltwise_swish, 1.f, false, "silu backward");
}

Tensor tanhForward(const Tensor& x) { return eltwiseForward(x, Alg::eltwise_tanh, 0.f, "tanh forward"); }
Tensor tanhBackward(const Tensor& gy, const Tensor& y) {
  return eltwiseBackward(gy, y, Alg::eltwise_tanh_use_dst_for_bwd, 0.f, true, "tanh backward");
}

Tensor sigmoidForward(const Tensor& x) {
  return eltwiseForward(x, Alg::eltwise_logistic, 0.f, "sigmoid forward");
}
Tensor sigmoidBackward(const Tensor& gy, const Tensor& y) {
  return eltwiseBackward(gy, y, Alg::eltwise_logistic_use_dst_for_bwd, 0.f, true, "sigmoid backward");
}

// Written out: LOCKSTEP_KERNEL_ENTRY for relu would name kernels::reluForward, the dispatching
// entry point, which would call itself.
const ActivationKernels kActivation{
    .reluForward = nullptr,
    .reluBackward = nullptr,
    .leakyReluForward = &leakyReluForward,
    .leakyReluBackward = nullptr,  // the cpu loops': oneDNN's passes gy where x is NaN
    .geluForward = &geluForward,
    .geluBackward = &geluBackward,
    .geluTanhForward = &geluTanhForward,
    .geluTanhBackward = &geluTanhBackward,
    .siluForward = &siluForward,
    .siluBackward = &siluBackward,
    .tanhForward = &tanhForward,
    .tanhBackward = &tanhBackward,
    .sigmoidForward = &sigmoidForward,
    .sigmoidBackward = &sigmoidBackward,
};

}  // namespace lockstep::kernels::onednn
