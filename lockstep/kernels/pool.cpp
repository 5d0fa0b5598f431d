#include "lockstep/kernels/pool.h"

#include "lockstep/kernels/dispatch.h"
#include "lockstep/kernels/finite.h"
#include "lockstep/kernels/tables/pool.h"

namespace lockstep::kernels {

namespace {
const Backends<PoolKernels> kBackends{
    .onednn = &onednn::kPool, .reference = &reference::kPool, .cuda = LOCKSTEP_CUDA_TABLE(cuda::kPool)};

// oneDNN 2.6's max pooling ignores a NaN and starts each window from -FLT_MAX: a window holding a
// NaN gave its largest number, a window of -inf gave -3.4e38 (and, with padding, sent the gradient
// to the wrong element). torch's NaN wins and -inf stays. A CPU input holding any inf or nan (one
// read of it to tell) is pooled by the reference loops instead, whose workspace (an i64 index per
// output) the backward recognises.
bool pooledByReference(const Tensor& x) {
  return !x.isCuda() && backendFor(x.dtype()) != Backend::reference && hasNonFinite(x);
}
}  // namespace

Pool2dParams resolvePool2d(const Pool2dParams& p) {
  Pool2dParams r = p;
  for (int i = 0; i < 2; ++i) {
    if (r.stride[i] == 0) r.stride[i] = r.kernel[i];
  }
  return r;
}

Shape pool2dOutputShape(const Shape& x, const Pool2dParams& p0, const char* op) {
  const Pool2dParams p = resolvePool2d(p0);
  LOCKSTEP_ENFORCE(x.size() == 4, ValueError, op, ": input ", shapeToString(x), " must be 4-d [N, C, H, W]");
  Shape out{x[0], x[1], 0, 0};
  for (int i = 0; i < 2; ++i) {
    const int64_t k = p.kernel[i], s = p.stride[i], pad = p.padding[i], in = x[2 + i];
    LOCKSTEP_ENFORCE(k >= 1 && s >= 1 && pad >= 0 && 2 * pad <= k, ValueError, op, ": kernel ", k,
                     ", stride ", s, ", padding ", pad, " invalid for input ", shapeToString(x),
                     " (kernel and stride >= 1, padding at most half the kernel)");
    const int64_t span = in + 2 * pad - k;
    LOCKSTEP_ENFORCE(span >= 0, ValueError, op, ": kernel ", k, " is larger than the padded input ",
                     shapeToString(x));
    int64_t o = (span + (p.ceil_mode ? s - 1 : 0)) / s + 1;
    if (p.ceil_mode && (o - 1) * s >= in + pad) --o;  // the last window must start inside x or the left pad
    out[2 + i] = o;
  }
  return out;
}

namespace {

void checkGrad(const Tensor& gy, const Shape& out, const char* op) {
  LOCKSTEP_ENFORCE(gy.shape() == out, ValueError, op, " backward: gradient ", shapeToString(gy.shape()),
                   " differs from the output shape ", shapeToString(out));
}

Shape adaptiveShape(const Tensor& x, std::array<int64_t, 2> out) {
  LOCKSTEP_ENFORCE(x.dim() == 4 && out[0] >= 1 && out[1] >= 1, ValueError, "adaptive_avg_pool2d: input ",
                   shapeToString(x.shape()), " must be 4-d and the output size [", out[0], ", ", out[1],
                   "] positive");
  return {x.size(0), x.size(1), out[0], out[1]};
}
}  // namespace

MaxPool2dResult maxPool2dForward(const Tensor& x, const Pool2dParams& p0, bool training) {
  const Pool2dParams p = resolvePool2d(p0);
  pool2dOutputShape(x.shape(), p, "max_pool2d");
  if (pooledByReference(x)) return reference::kPool.maxPool2dForward(x, p, training);
  return dispatch<&PoolKernels::maxPool2dForward>(kBackends, x, x, p, training);
}

Tensor maxPool2dBackward(const Tensor& gy, const Tensor& x, const Tensor& workspace, const Pool2dParams& p0) {
  const Pool2dParams p = resolvePool2d(p0);
  checkGrad(gy, pool2dOutputShape(x.shape(), p, "max_pool2d"), "max_pool2d");
  if (!x.isCuda() && (workspace.defined() ? workspace.dtype() == DType::i64 : pooledByReference(x)))
    return reference::kPool.maxPool2dBackward(gy, x, workspace, p);
  return dispatch<&PoolKernels::maxPool2dBackward>(kBackends, x, gy, x, workspace, p);
}

Tensor avgPool2dForward(const Tensor& x, const Pool2dParams& p0) {
  const Pool2dParams p = resolvePool2d(p0);
  pool2dOutputShape(x.shape(), p, "avg_pool2d");
  return dispatch<&PoolKernels::avgPool2dForward>(kBackends, x, x, p);
}

Tensor avgPool2dBackward(const Tensor& gy, const Tensor& x, const Pool2dParams& p0) {
  const Pool2dParams p = resolvePool2d(p0);
  checkGrad(gy, pool2dOutputShape(x.shape(), p, "avg_pool2d"), "avg_pool2d");
  return dispatch<&PoolKernels::avgPool2dBackward>(kBackends, x, gy, x, p);
}

Tensor adaptiveAvgPool2dForward(const Tensor& x, std::array<int64_t, 2> out) {
  adaptiveShape(x, out);
  return dispatch<&PoolKernels::adaptiveAvgPool2dForward>(kBackends, x, x, out);
}

Tensor adaptiveAvgPool2dBackward(const Tensor& gy, const Tensor& x, std::array<int64_t, 2> out) {
  checkGrad(gy, adaptiveShape(x, out), "adaptive_avg_pool2d");
  return dispatch<&PoolKernels::adaptiveAvgPool2dBackward>(kBackends, x, gy, x, out);
}

}  // namespace lockstep::kernels
