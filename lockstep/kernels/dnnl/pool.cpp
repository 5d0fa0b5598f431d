// oneDNN pooling, cached per shape/layout. Max pooling keeps oneDNN's workspace (where each maximum
// came from) so its backward never rescans the input. Two cases have no oneDNN primitive and use
// the reference loops: average pooling whose ceil_mode window reaches past the right padding while
// counting padding (PyTorch's divisor stops at the padding, oneDNN's does not), and adaptive
// pooling whose bins differ in size.
#include "lockstep/kernels/pool.h"

#include <dnnl.hpp>
#include <sstream>
#include <unordered_map>

#include "lockstep/kernels/dnnl/activation_layout.h"
#include "lockstep/kernels/tables/pool.h"

namespace lockstep::kernels::onednn {

namespace {
using Mem = dnnl::memory;

struct Geometry {
  Mem::dims strides, kernel, pad_l, pad_r;
};

Geometry geometry(const Shape& xs, const Shape& ys, const Pool2dParams& p) {
  Geometry g;
  for (int i = 0; i < 2; ++i) {
    g.strides.push_back(p.stride[i]);
    g.kernel.push_back(p.kernel[i]);
    g.pad_l.push_back(p.padding[i]);
    // What the last window needs: more than padding[i] with ceil_mode, possibly less without.
    g.pad_r.push_back(
        std::max<int64_t>(0, (ys[2 + i] - 1) * p.stride[i] + p.kernel[i] - xs[2 + i] - p.padding[i]));
  }
  return g;
}

std::string keyFor(dnnl::algorithm alg, const Tensor& x, MemoryFormat f, const Pool2dParams& p,
                   bool training) {
  std::ostringstream os;
  os << static_cast<int>(alg) << dtypeName(x.dtype()) << shapeToString(x.shape()) << formatKey(f) << "k"
     << p.kernel[0] << "," << p.kernel[1] << "s" << p.stride[0] << "," << p.stride[1] << "p" << p.padding[0]
     << "," << p.padding[1] << "c" << p.ceil_mode << "t" << training;
  return os.str();
}

dnnl::pooling_forward::desc forwardDesc(dnnl::algorithm alg, bool training, const Shape& xs, const Shape& ys,
                                        DType dt, MemoryFormat f, const Pool2dParams& p) {
  Geometry g = geometry(xs, ys, p);
  return dnnl::pooling_forward::desc(
      training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference, alg,
      activationDesc(xs, dt, f), activationDesc(ys, dt, f), g.strides, g.kernel, g.pad_l, g.pad_r);
}

struct ForwardPrims {
  dnnl::pooling_forward prim;
  Mem::desc workspace;  // zero when the primitive keeps none
};

Tensor forward(dnnl::algorithm alg, const Tensor& x0, const Pool2dParams& p, bool training,
               Tensor* workspace) {
  const MemoryFormat f = formatOf(x0);
  Tensor x = inFormat(x0, f);
  const Shape ys = pool2dOutputShape(x.shape(), p, "pool2d");
  Tensor y = Tensor::empty(ys, x.dtype(), f);
  if (y.numel() == 0) return y;
  static PrimitiveCache<ForwardPrims> cache;
  try {
    auto& prims = cache.get(keyFor(alg, x, f, p, training), [&] {
      dnnl::pooling_forward::primitive_desc pd(forwardDesc(alg, training, x.shape(), ys, x.dtype(), f, p),
                                               attributes(), engine());
      return ForwardPrims{dnnl::pooling_forward(pd), pd.workspace_desc()};
    });
    std::unordered_map<int, Mem> args{
        {DNNL_ARG_SRC, Mem(activationDesc(x.shape(), x.dtype(), f), engine(), x.dataPtr())},
        {DNNL_ARG_DST, Mem(activationDesc(ys, x.dtype(), f), engine(), y.dataPtr())}};
    if (workspace && prims.workspace.get_size() > 0) {
      *workspace = Tensor::empty({static_cast<int64_t>(prims.workspace.get_size())}, DType::u8);
      args.emplace(DNNL_ARG_WORKSPACE, Mem(prims.workspace, engine(), workspace->dataPtr()));
    }
    execute(prims.prim, args);
  } catch (const dnnl::error& e) {
    rethrow(e, "pool2d forward");
  }
  return y;
}

Tensor backward(dnnl::algorithm alg, const Tensor& gy0, const Tensor& x, const Tensor& workspace,
                const Pool2dParams& p) {
  const MemoryFormat f = formatOf(x);
  Tensor gy = inFormat(gy0, f);
  Tensor gx = Tensor::empty(x.shape(), x.dtype(), f);
  if (gx.numel() == 0) return gx;
  struct Prims {
    dnnl::pooling_backward prim;
    Mem::desc workspace;
  };
  static PrimitiveCache<Prims> cache;
  try {
    auto& prims = cache.get(keyFor(alg, x, f, p, true), [&] {
      dnnl::pooling_forward::primitive_desc hint(
          forwardDesc(alg, true, x.shape(), gy.shape(), x.dtype(), f, p), engine());
      Geometry g = geometry(x.shape(), gy.shape(), p);
      dnnl::pooling_backward::desc bd(alg, activationDesc(x.shape(), x.dtype(), f),
                                      activationDesc(gy.shape(), x.dtype(), f), g.strides, g.kernel, g.pad_l,
                                      g.pad_r);
      dnnl::pooling_backward::primitive_desc pd(bd, attributes(), engine(), hint);
      return Prims{dnnl::pooling_backward(pd), pd.workspace_desc()};
    });
    std::unordered_map<int, Mem> args{
        {DNNL_ARG_DIFF_DST, Mem(activationDesc(gy.shape(), gy.dtype(), f), engine(), gy.dataPtr())},
        {DNNL_ARG_DIFF_SRC, Mem(activationDesc(x.shape(), x.dtype(), f), engine(), gx.dataPtr())}};
    if (prims.workspace.get_size() > 0) {
      LOCKSTEP_ENFORCE(workspace.defined() && workspace.nbytes() == prims.workspace.get_size(), ValueError,
                       "max_pool2d backward needs the workspace of a training-mode forward on input ",
                       shapeToString(x.shape()));
      args.emplace(DNNL_ARG_WORKSPACE, Mem(prims.workspace, engine(), workspace.dataPtr()));
    }
    execute(prims.prim, args);
  } catch (const dnnl::error& e) {
    rethrow(e, "pool2d backward");
  }
  return gx;
}

dnnl::algorithm avgAlgorithm(bool include_pad) {
  return include_pad ? dnnl::algorithm::pooling_avg_include_padding
                     : dnnl::algorithm::pooling_avg_exclude_padding;
}

// PyTorch counts padding only up to the padded edge; oneDNN counts whole kernels.
bool divisorsAgree(const Shape& xs, const Pool2dParams& p) {
  if (!p.count_include_pad) return true;
  const Shape ys = pool2dOutputShape(xs, p, "avg_pool2d");
  for (int i = 0; i < 2; ++i) {
    if ((ys[2 + i] - 1) * p.stride[i] + p.kernel[i] > xs[2 + i] + 2 * p.padding[i]) return false;
  }
  return true;
}

// Adaptive pooling with equal bins is plain average pooling.
bool uniformBins(const Tensor& x, std::array<int64_t, 2> out) {
  return x.size(2) % out[0] == 0 && x.size(3) % out[1] == 0;
}

Pool2dParams uniformParams(const Tensor& x, std::array<int64_t, 2> out) {
  Pool2dParams p;
  p.kernel = {x.size(2) / out[0], x.size(3) / out[1]};
  p.stride = p.kernel;
  return p;
}
}  // namespace

MaxPool2dResult maxPool2dForward(const Tensor& x, const Pool2dParams& p, bool training) {
  MaxPool2dResult r;
  r.y = forward(dnnl::algorithm::pooling_max, x, p, training, training ? &r.workspace : nullptr);
  return r;
}

Tensor maxPool2dBackward(const Tensor& gy, const Tensor& x, const Tensor& workspace, const Pool2dParams& p) {
  return backward(dnnl::algorithm::pooling_max, gy, x, workspace, p);
}

Tensor avgPool2dForward(const Tensor& x, const Pool2dParams& p) {
  if (!divisorsAgree(x.shape(), p)) return inFormat(reference::kPool.avgPool2dForward(x, p), formatOf(x));
  return forward(avgAlgorithm(p.count_include_pad), x, p, false, nullptr);
}

Tensor avgPool2dBackward(const Tensor& gy, const Tensor& x, const Pool2dParams& p) {
  if (!divisorsAgree(x.shape(), p))
    return inFormat(reference::kPool.avgPool2dBackward(gy, x, p), formatOf(x));
  return backward(avgAlgorithm(p.count_include_pad), gy, x, Tensor(), p);
}

Tensor adaptiveAvgPool2dForward(const Tensor& x, std::array<int64_t, 2> out) {
  if (!uniformBins(x, out)) return inFormat(reference::kPool.adaptiveAvgPool2dForward(x, out), formatOf(x));
  return forward(dnnl::algorithm::pooling_avg_exclude_padding, x, uniformParams(x, out), false, nullptr);
}

Tensor adaptiveAvgPool2dBackward(const Tensor& gy, const Tensor& x, std::array<int64_t, 2> out) {
  if (!uniformBins(x, out))
    return inFormat(reference::kPool.adaptiveAvgPool2dBackward(gy, x, out), formatOf(x));
  return backward(dnnl::algorithm::pooling_avg_exclude_padding, gy, x, Tensor(), uniformParams(x, out));
}

const PoolKernels kPool{LOCKSTEP_POOL_OPS(LOCKSTEP_KERNEL_ENTRY)};

}  // namespace lockstep::kernels::onednn
