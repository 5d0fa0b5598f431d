#include "lockstep/kernels/conv.h"

#include "lockstep/kernels/dispatch.h"
#include "lockstep/kernels/tables/conv.h"

namespace lockstep::kernels {

namespace {
const Backends<ConvKernels> kBackends{
    .onednn = &onednn::kConv, .reference = &reference::kConv, .cuda = LOCKSTEP_CUDA_TABLE(cuda::kConv)};
}  // namespace

Shape conv2dOutputShape(const Shape& x, const Shape& w, const Conv2dParams& p) {
  LOCKSTEP_ENFORCE(x.size() == 4 && w.size() == 4, ValueError, "conv2d: input ", shapeToString(x),
                   " and weight ", shapeToString(w),
                   " must both be 4-d ([N, C, H, W] and [O, C/groups, kH, kW])");
  LOCKSTEP_ENFORCE(p.groups >= 1 && w[0] % p.groups == 0 && x[1] == w[1] * p.groups, ValueError,
                   "conv2d: input ", shapeToString(x), " has ", x[1], " channels but weight ",
                   shapeToString(w), " with groups=", p.groups, " expects ", w[1] * p.groups,
                   " (and O divisible by groups)");
  Shape out{x[0], w[0], 0, 0};
  for (int i = 0; i < 2; ++i) {
    LOCKSTEP_ENFORCE(p.stride[i] >= 1 && p.dilation[i] >= 1 && p.padding[i] >= 0, ValueError,
                     "conv2d: stride and dilation must be >= 1 and padding >= 0, got stride ", p.stride[i],
                     ", dilation ", p.dilation[i], ", padding ", p.padding[i]);
    const int64_t span = p.dilation[i] * (w[2 + i] - 1) + 1;
    const int64_t padded = x[2 + i] + 2 * p.padding[i];
    LOCKSTEP_ENFORCE(w[2 + i] >= 1 && padded >= span, ValueError, "conv2d: kernel of weight ",
                     shapeToString(w), " (dilated) is larger than the padded input ", shapeToString(x));
    out[2 + i] = (padded - span) / p.stride[i] + 1;
  }
  return out;
}

Shape checkConv2d(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p) {
  Shape out = conv2dOutputShape(x.shape(), w.shape(), p);
  LOCKSTEP_ENFORCE(x.dtype() == w.dtype(), ValueError, "conv2d: input ", x.describe(), " and weight ",
                   w.describe(), " differ in dtype");
  if (b.defined()) {
    LOCKSTEP_ENFORCE(b.shape() == Shape{w.size(0)} && b.dtype() == w.dtype(), ValueError, "conv2d: bias ",
                     b.describe(), " does not match weight ", w.describe(), " (expected [", w.size(0), "])");
  }
  return out;
}

Tensor conv2dInput(const Tensor& x) { return dispatchAsIs<&ConvKernels::conv2dInput>(kBackends, x, x); }
Tensor conv2dWeight(const Tensor& weight, const Tensor& x) {
  return dispatchAsIs<&ConvKernels::conv2dWeight>(kBackends, x, weight, x);
}

Tensor conv2dForward(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p) {
  checkConv2d(x, w, b, p);
  return dispatch<&ConvKernels::conv2dForward>(kBackends, x, x, w, b, p);
}

void checkConv2dBackwardData(const Tensor& gy, const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  Shape out = checkConv2d(x, w, Tensor(), p);
  LOCKSTEP_ENFORCE(gy.shape() == out, ValueError, "conv2d backward: gradient ", shapeToString(gy.shape()),
                   " differs from the output shape ", shapeToString(out));
}

Tensor conv2dBackwardData(const Tensor& gy, const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  checkConv2dBackwardData(gy, x, w, p);
  return dispatch<&ConvKernels::conv2dBackwardData>(kBackends, x, gy, x, w, p);
}

Conv2dWeightGrads conv2dBackwardWeights(const Tensor& gy, const Tensor& x, const Shape& weight_shape,
                                        bool with_bias, const Conv2dParams& p) {
  Shape out = conv2dOutputShape(x.shape(), weight_shape, p);
  LOCKSTEP_ENFORCE(gy.shape() == out, ValueError, "conv2d backward: gradient ", shapeToString(gy.shape()),
                   " differs from the output shape ", shapeToString(out));
  return dispatch<&ConvKernels::conv2dBackwardWeights>(kBackends, x, gy, x, weight_shape, with_bias, p);
}

}  // namespace lockstep::kernels
